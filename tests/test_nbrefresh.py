"""make notebooks never overwrites a notebook holding work git does not have."""

from __future__ import annotations

import json
import subprocess

import pytest

from tklab import nbrefresh


def _notebook(path, source: str) -> None:
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {"execution": {"t": 1}},
                     "outputs": [], "source": source}],
          "metadata": {"widgets": {"state": {}}}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))


@pytest.fixture
def repo(tmp_path, monkeypatch):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.setattr(nbrefresh, "ROOT", tmp_path)
    (tmp_path / "notebooks").mkdir()
    return tmp_path


def test_edited_notebooks_are_refused_and_named(repo, capsys, monkeypatch):
    nb = repo / "notebooks" / "mine.ipynb"
    _notebook(nb, "print('my work')")
    ran = []
    monkeypatch.setattr(nbrefresh, "refresh", lambda p: ran.append(p))
    assert nbrefresh.main([str(nb)]) == 1
    assert "mine.ipynb" in capsys.readouterr().err and ran == []
    assert "my work" in nb.read_text()


def test_backup_keeps_a_copy_before_refreshing(repo, monkeypatch):
    nb = repo / "notebooks" / "mine.ipynb"
    _notebook(nb, "print('my work')")
    monkeypatch.setattr(nbrefresh, "refresh", lambda p: p.write_text("refreshed"))
    assert nbrefresh.main(["--backup", str(nb)]) == 0
    backups = list((repo / "notebooks").glob("mine.bak-*.ipynb"))
    assert len(backups) == 1 and "my work" in backups[0].read_text()
    assert nb.read_text() == "refreshed"


def test_committed_notebooks_are_refreshed(repo, monkeypatch):
    nb = repo / "notebooks" / "clean.ipynb"
    _notebook(nb, "1 + 1")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    ran = []
    monkeypatch.setattr(nbrefresh, "refresh", lambda p: ran.append(p))
    assert nbrefresh.main([str(nb)]) == 0 and ran == [nb]


def test_clean_drops_run_noise():
    nb = {"cells": [{"metadata": {"execution": {"iopub.status.busy": "x"}, "tags": ["keep"]}}],
          "metadata": {"widgets": {"state": {}}, "kernelspec": {"name": "python3"}}}
    out = nbrefresh.clean(nb)
    assert out["cells"][0]["metadata"] == {"tags": ["keep"]}
    # the installed kernel's own name: a notebook that names another opens marked unsaved (issue 31.9)
    assert out["metadata"] == {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                                              "name": "python3"}}
