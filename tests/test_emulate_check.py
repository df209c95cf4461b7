"""``tklab.check`` without a GPU: CUDA exercises get a real verdict from the CPU emulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from tklab import gpu, specs
from tklab.grading import cases as emu_cases
from tklab.grading import emulated
from tklab.grading.check import check


def _label() -> str:
    """What the run says it ran on: the interpreted PTX, or (no NVRTC) the practice build."""
    from tklab import emulate

    return emulated.LABEL if emulate.engine() == "ptx" else emulated.PRACTICE_LABEL


def _established() -> str:
    from tklab import emulate

    return "cpu-emulation" if emulate.engine() == "ptx" else "cpu-practice"

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(gpu.available() or not emu_cases.can_run(specs.get("ch02_smem_tiling")),
                                reason="a GPU is here (checks run on it), or no C++ compiler for the emulator")


def test_an_untouched_exercise_fails_with_the_first_wrong_element(tmp_path: Path) -> None:
    res = check("ch02", ROOT / "exercises" / "ch02_smem_tiling.cu", bench=False)
    assert res.passed is False and res.run_status == "wrong" and res.run_where == _label()
    assert res.mismatch["output"] == "C" and res.mismatch["index"] == [0, 0]
    assert any("too big to emulate" in n for n in res.notes)


def test_a_race_fails_the_check_and_says_why(tmp_path: Path) -> None:
    src = (ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu").read_text()
    broken = tmp_path / "ch02_smem_tiling.cu"
    broken.write_text(src.replace("        __syncthreads();  // the tiles are complete before anyone reads them\n", ""))
    res = check("ch02", broken, bench=False)
    assert res.passed is False and res.run_status == "error"
    assert "SharedRace: shared-memory race" in res.summary and "__syncthreads()" in res.summary


def test_cases_too_big_for_the_cpu_are_left_out_and_named() -> None:
    spec = specs.get("ch06_tiles")
    small = emu_cases.cases(spec)
    assert small and all(d in spec.cases for d in small)
    assert {"M": 1024, "N": 1024, "K": 512} not in small


def test_right_and_subtly_wrong_answers_are_told_apart_and_say_how(tmp_path: Path, capsys) -> None:
    """The pair of tests/test_check.py's issue-13 test, now with the emulator: one passes, one fails,
    both established by CPU emulation."""
    from tklab.grading.check import main

    wrong = tmp_path / "ch02_smem_tiling.cu"
    wrong.write_text((ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu").read_text().replace(
        "C[row * N + col] = acc;", "C[row * N + col] = acc + 1.0f;"))
    assert main([str(ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu"), "--no-bench"]) == 0
    assert "PASSED" in capsys.readouterr().out
    assert main([str(wrong), "--no-bench"]) == 1
    out = capsys.readouterr().out
    assert "FAILED: wrong result" in out and _label() in out
    res = check("ch02", wrong, bench=False)
    assert res.established == _established() and res.mismatch["wrong"] > 0
