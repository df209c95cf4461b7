"""A notebook's checks can be made repeatable ($TKLAB_CHECK_SEED, set by `make notebooks`); grading cannot."""

from __future__ import annotations

import pytest

from tklab.course import nbrefresh
from tklab.grading import check, grade
from tklab.paths import REPO

SOLUTION = REPO / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu"


def test_the_variable_fixes_the_seed_a_check_runs_with(monkeypatch) -> None:
    seen = []

    def fake_run_isolated(*args, **kw):
        seen.append(kw["seed"])
        raise RuntimeError("stop here")  # the seed is all this test needs

    monkeypatch.setattr("tklab.grading.runner.run_isolated", fake_run_isolated)
    for value in ("7", "7"):
        monkeypatch.setenv(check.SEED_VARIABLE, value)
        with pytest.raises(RuntimeError, match="stop here"):
            check.check("ch02_smem_tiling", SOLUTION, bench=False)
    monkeypatch.setenv(check.SEED_VARIABLE, "")
    with pytest.raises(RuntimeError, match="stop here"):
        check.check("ch02_smem_tiling", SOLUTION, bench=False)
    assert seen == [7, 7, None]


def test_a_bad_value_is_named(monkeypatch) -> None:
    monkeypatch.setenv(check.SEED_VARIABLE, "seven")
    with pytest.raises(ValueError, match="TKLAB_CHECK_SEED must be an integer"):
        check.check("ch02_smem_tiling", SOLUTION)


def test_grading_drops_the_variable(monkeypatch, tmp_path) -> None:
    captured = {}

    class FakeSandbox:
        def __init__(self, *args, **kw):
            pass

        def start(self, cmd, env):
            captured["env"] = env
            raise RuntimeError("stop here")

    monkeypatch.setenv(check.SEED_VARIABLE, "7")
    monkeypatch.setattr("tklab.grading.sandbox.Sandbox", FakeSandbox)
    with pytest.raises(RuntimeError, match="stop here"):
        grade._check_in_subprocess("ch02_smem_tiling", tmp_path / "x.cu", timeout=1, run=False, bench=False)
    assert captured["env"] is not None and check.SEED_VARIABLE not in captured["env"]


def test_make_notebooks_sets_the_seed_only_while_it_runs(monkeypatch, tmp_path) -> None:
    import nbclient

    seen = []

    class FakeClient:
        def __init__(self, nb, **kw):
            pass

        def execute(self):
            import os

            seen.append(os.environ.get(check.SEED_VARIABLE))

    monkeypatch.setattr(nbclient, "NotebookClient", FakeClient)
    monkeypatch.delenv(check.SEED_VARIABLE, raising=False)
    import nbformat

    path = tmp_path / "n.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), path)
    nbrefresh.refresh(path)
    import os

    assert seen == ["2026"] and check.SEED_VARIABLE not in os.environ
