"""Verdicts that name the real mistake (issue 38, deliverable 5): typical mistakes tried as a learner would, each with
the words its CPU verdict must show. (Chapters 02 and 07 keep theirs in their planted suites: ``shows``.)

- a stage refilled by a producer that skipped its wait for the hand-back blames the producer, not the consumer;
- a stage handed back after ``wait<1>`` says which group is still running (the wait that left it running);
- an mbarrier is named by where the kernel initialised it, not only by its bytes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tklab import emulate, gpu, specs
from tklab.grading import cases as emu_cases
from tklab.grading.check import check

ROOT = Path(__file__).resolve().parent.parent
WS = (ROOT / "solutions" / "ch08_warp_specialized" / "ch08_warp_specialized.cu").read_text()
cpu_path = pytest.mark.skipif(gpu.available() or emulate.engine() != "ptx" or
                              not emu_cases.can_run(specs.get("ch08_warp_specialized")),
                              reason="a GPU is here, or no NVRTC / C++ compiler for the interpreter")


def _run(tmp_path: Path, exercise: str, src: str) -> str:
    f = tmp_path / specs.get(exercise).filename
    f.write_text(src)
    res = check(exercise, f, bench=False, trace=False)
    assert res.passed is False, res
    return res.run_message


def _edit(src: str, find: str, replace: str) -> str:
    assert src.count(find) == 1, find
    return src.replace(find, replace)


@cpu_path
def test_a_producer_that_skips_its_wait_for_a_free_stage_is_named(tmp_path: Path) -> None:
    msg = _run(tmp_path, "ch08_warp_specialized", _edit(WS, "wait(pipe.empty[at.stage], at.phase ^ 1);", ""))
    assert "Does the producer wait on the stage's empty mbarrier" in msg, msg
    assert "so wait on that barrier" not in msg, msg  # the consumer, who did wait, is not told to


@cpu_path
def test_a_stage_handed_back_after_wait_1_says_which_group_still_runs(tmp_path: Path) -> None:
    wait0 = "            warpgroup::mma_async_wait<0>();  // the group is done: its stage goes back to the producer\n"
    src = _edit(WS, wait0, "            warpgroup::mma_async_wait<1>();\n")
    msg = _run(tmp_path, "ch08_warp_specialized", src)
    assert "hands back" in msg and "wgmma.wait_group 1" in msg and "leaves the 1 most recent group running" in msg, msg


@cpu_path
def test_an_mbarrier_is_named_where_it_was_initialised(tmp_path: Path) -> None:
    src = _edit(WS, "wait(pipe.empty[at.stage], at.phase ^ 1);", "wait(pipe.empty[at.stage], at.phase);")
    msg = _run(tmp_path, "ch08_warp_specialized", src)  # the producer waits for a phase that never completes
    assert "the mbarrier initialised at ch08_warp_specialized.cu:" in msg, msg
