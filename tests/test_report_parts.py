"""`make gpu-check` in parts: which steps a part runs (no GPU needed to decide that)."""

from __future__ import annotations

import pytest

from tklab import report


def _names(steps: list[report.Step]) -> list[str]:
    return [s.name for s in steps]


def test_the_whole_check_runs_every_notebook_and_bench_script() -> None:
    steps = report.steps(set())
    assert _names(steps)[:3] == ["doctor", "GPU tests", "notebooks (nbval)"]
    assert steps[2].command[-1] == "notebooks"
    assert "benchmark flash_fwd.py" in _names(steps) and "benchmark gemm_wgmma.py" in _names(steps)


def test_a_part_names_its_notebooks_and_scripts() -> None:
    steps = report.steps({"tests"}, notebooks="0[0-2]*", bench="gemm_wgmma.py")
    assert _names(steps) == ["doctor", "notebooks (nbval): 0[0-2]*", "benchmark gemm_wgmma.py"]
    assert [a for a in steps[1].command if a.startswith("notebooks/")] == [
        "notebooks/00_the_machine.ipynb", "notebooks/01_naive_matmul.ipynb", "notebooks/02_coalescing_tiling.ipynb"]


@pytest.mark.parametrize(("kw", "message"), [({"notebooks": "99*"}, "matches no notebook"),
                                             ({"bench": "nope.py"}, "no script")])
def test_a_part_that_selects_nothing_is_refused(kw: dict[str, str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        report.steps(set(), **kw)


def test_a_notebook_cell_past_its_limit_fails_by_name_with_the_slowest_cells_listed(tmp_path) -> None:
    """The nbval step as the report runs it, on a two-cell notebook whose second cell outlives --cell-timeout:
    pytest fails that cell by its number (not the whole step by the step's limit) and lists the durations."""
    import json
    import subprocess

    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "id": "a", "source": "x = 1"},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "id": "b",
         "source": "import time\ntime.sleep(60)"}]}
    (tmp_path / "slow.ipynb").write_text(json.dumps(nb))
    step = report.steps({"tests", "bench"}, notebooks="0[0]*", cell_timeout=5)[1]
    assert "--nbval-cell-timeout=5" in step.command and "--durations=8" in step.command
    command = [a for a in step.command if not a.startswith("notebooks/")] + ["slow.ipynb"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "slow.ipynb::Cell 1" in done.stdout and "slowest" in done.stdout
    assert "1 failed, 1 passed" in done.stdout


def test_the_report_refuses_a_limit_that_is_not_positive() -> None:
    with pytest.raises(SystemExit):
        report.main(["--cell-timeout", "0"])
