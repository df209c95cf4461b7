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
