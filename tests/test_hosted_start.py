"""Chapter 00's first code cell: the workbook installed where only pip is there (a hosted notebook).

The cell's own source, read from the notebook, runs in a fresh virtual environment (``--system-site-packages``
over this Python's base, so pip is there without installing it): it clones the workbook (here from this
checkout, ``TKLAB_GIT``), installs it with ``pip install -e`` and imports it in the same process; run again
it does nothing; inside a checkout it installs that checkout and clones nothing; where tklab is installed
(the workbook's .venv, nbval in CI) it does nothing at all.

What is NOT exercised: the dependencies' download. The install runs with ``TKLAB_PIP_ARGS=--no-deps``, since
fetching NVRTC, numba and the rest from PyPI takes minutes on CI's two cores; pip's resolution of
``pyproject.toml`` itself is exercised (the editable build runs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _cell() -> str:
    cells = json.loads((ROOT / "notebooks" / "00_the_machine.ipynb").read_text())["cells"]
    starts = [i for i, c in enumerate(cells) if "hosted-start" in c.get("metadata", {}).get("tags", [])]
    assert starts == [1], "one hosted-start cell, right after the title"
    return "".join(cells[1]["source"])


def _env(**extra: str) -> dict[str, str]:
    """A learner's environment: no PYTHONPATH pointing at this checkout, no user site, no GPU tools."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TKLAB_PIP_ARGS")}
    env.update(PYTHONNOUSERSITE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def _run(python: Path | str, code: str, cwd: Path, **env: str) -> str:
    out = subprocess.run([str(python), "-c", code], cwd=cwd, env=_env(**env), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_where_tklab_is_installed_the_cell_does_nothing(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(ROOT)} if "PYTHONPATH" in os.environ else {}
    out = _run(sys.executable, _cell(), tmp_path, TKLAB_GIT=str(tmp_path / "no-such-repository"), **env)
    assert out == "tklab is installed: nothing to do here\n"
    assert list(tmp_path.iterdir()) == []  # nothing cloned, nothing written


def _fresh_venv(where: Path) -> Path:
    base = getattr(sys, "_base_executable", sys.executable)
    has_pip = subprocess.run([base, "-m", "pip", "--version"], capture_output=True).returncode == 0
    args = ["--system-site-packages", "--without-pip"] if has_pip else []
    subprocess.run([base, "-m", "venv", *args, str(where)], check=True, timeout=300)
    python = where / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import tklab"], cwd=where, env=_env(), capture_output=True)
    if probe.returncode == 0:
        pytest.skip("this Python's base already has tklab installed: no fresh environment to test in")
    return python


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists() or sys.platform == "win32",
                    reason="needs git and a git checkout to clone from (and a POSIX venv)")
def test_in_a_fresh_environment_the_cell_clones_installs_and_imports(tmp_path: Path) -> None:
    python = _fresh_venv(tmp_path / "venv")
    work = tmp_path / "content"  # a hosted notebook's folder
    work.mkdir()
    cell = _cell()
    out = _run(python, cell + "\nimport tklab\nprint('imported', tklab.__file__)", work,
               TKLAB_GIT=str(ROOT), TKLAB_PIP_ARGS="--no-deps")
    clone = (work / "tklab").resolve()
    assert f"tklab installed from {clone}" in out and f"imported {clone / 'tklab' / '__init__.py'}" in out
    # a new process (a restarted kernel) finds the editable install
    assert _run(python, "import tklab; print(tklab.__file__)", tmp_path).strip() == str(clone / "tklab" / "__init__.py")
    # run again: nothing to do, nothing cloned twice
    assert _run(python, cell, work, TKLAB_GIT=str(tmp_path / "no-such-repository")) == \
        "tklab is installed: nothing to do here\n"
    assert sorted(p.name for p in work.iterdir()) == ["tklab"]
    # inside a checkout without tklab installed: that checkout is installed, nothing cloned
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "tklab"], env=_env(), check=True, timeout=120)
    out = _run(python, cell, clone / "notebooks", TKLAB_GIT=str(tmp_path / "no-such-repository"),
               TKLAB_PIP_ARGS="--no-deps")
    assert f"tklab installed from {clone}" in out
    assert sorted(p.name for p in work.iterdir()) == ["tklab"] and not (clone / "notebooks" / "tklab").exists()


# ---- which repository the hosted path opens and clones (tklab.course.hosted, `make hosted`) ----------------

@pytest.mark.parametrize(("url", "repo"), [
    ("https://github.com/ada/tklab.git", "ada/tklab"), ("https://github.com/ada/tklab", "ada/tklab"),
    ("git@github.com:ada/tk-lab.git\n", "ada/tk-lab"), ("ssh://git@github.com/ada/tklab.git", "ada/tklab"),
    ("https://token@github.com/ada/tklab/", "ada/tklab"), ("https://gitlab.com/ada/tklab.git", None),
    ("/srv/git/tklab", None), ("", None)])
def test_the_repository_is_read_from_a_github_remote(url: str, repo: str | None) -> None:
    from tklab.course import hosted

    assert hosted.github_repo(url) == repo


def test_the_shipped_files_name_one_repository() -> None:
    from tklab.course import hosted

    badge, clone = hosted.named(ROOT)
    assert badge is not None and badge == clone, (badge, clone)


def _fork(tmp_path: Path, origin: str) -> Path:
    """A clone of this checkout (its README and chapter 00 as they are now) whose origin is ``origin``."""
    fork = tmp_path / "fork"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", str(fork)], check=True, timeout=300)
    subprocess.run(["git", "remote", "set-url", "origin", origin], cwd=fork, check=True)
    for name in ("README.md", "notebooks/00_the_machine.ipynb"):
        shutil.copy(ROOT / name, fork / name)
    return fork


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists() or sys.platform == "win32",
                    reason="needs git and a git checkout to clone from (and a POSIX venv)")
def test_a_fork_names_itself_and_its_hosted_notebook_clones_it(tmp_path: Path) -> None:
    """`make hosted` in a clone of a fork writes the fork into README's badge and chapter 00's cell, and
    nothing else; the cell then clones the fork (here GitHub's URL is served from this checkout, through git's
    ``insteadOf``), installs it and imports it, in a fresh environment."""
    from tklab.course import hosted

    fork = _fork(tmp_path, "git@github.com:ada/tklab.git")
    files = [fork / "README.md", fork / "notebooks" / "00_the_machine.ipynb"]
    before = [f.read_text().splitlines() for f in files]
    assert hosted.write(hosted.origin(fork), fork) == files
    assert hosted.named(fork) == ("ada/tklab", "ada/tklab") and hosted.write("ada/tklab", fork) == []  # idempotent
    for old, f in zip(before, files, strict=True):  # one line each, the rest byte for byte
        new = f.read_text().splitlines()
        assert len(new) == len(old) and sum(a != b for a, b in zip(old, new, strict=True)) == 1, f
    assert "https://colab.research.google.com/github/ada/tklab/blob/main/notebooks/00_the_machine.ipynb" in \
        (fork / "README.md").read_text()

    python = _fresh_venv(tmp_path / "venv")
    work = tmp_path / "content"
    work.mkdir()
    cell = "".join(next(c for c in json.loads((fork / "notebooks" / "00_the_machine.ipynb").read_text())["cells"]
                        if "hosted-start" in c["metadata"].get("tags", []))["source"])
    git = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"url.file://{ROOT}.insteadOf",
           "GIT_CONFIG_VALUE_0": "https://github.com/ada/tklab"}
    out = _run(python, cell + "\nimport tklab\nprint('imported', tklab.__file__)", work, TKLAB_PIP_ARGS="--no-deps",
               **git)
    assert f"tklab installed from {(work / 'tklab').resolve()}" in out and "imported" in out


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX venv")
def test_while_no_repository_is_named_the_cell_says_where_to_put_it(tmp_path: Path) -> None:
    python = _fresh_venv(tmp_path / "venv")
    cell = _cell().replace('"https://github.com/OWNER/tklab")', '"https://github.com/OWNER/tklab")  # as shipped', 1)
    if "github.com/OWNER/tklab" not in cell:
        pytest.skip("chapter 00 names its repository: the placeholder is not shipped")
    out = subprocess.run([str(python), "-c", cell], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode != 0 and "does not name the workbook's repository yet: set TKLAB_GIT" in out.stderr
    assert "make hosted" in out.stderr and not (tmp_path / "tklab").exists()  # nothing cloned
