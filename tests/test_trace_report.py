"""The check report's "why" section (tklab.grading.trace_report): when it is taken, and what it says."""

from __future__ import annotations

from pathlib import Path

import pytest
from answers import answer

from tklab.grading import cases as emu_cases
from tklab.grading import specs
from tklab.grading import trace_report as report
from tklab.grading.verdict import CheckResult, StaticResult

ROOT = Path(__file__).resolve().parent.parent


def _res(**kw: object) -> CheckResult:
    return CheckResult(**{"exercise": "ch07_tma_ring", "title": "t", "path": "p", "compiled": True,  # type: ignore[arg-type]
                          "run_status": "ok", **kw})


def test_why_is_taken_for_a_slow_run_or_on_request() -> None:
    slow = _res(speed={"ratio": 0.5, "target": 0.8}, established="gpu")
    fast = _res(speed={"ratio": 0.9, "target": 0.8}, established="gpu")
    floor = _res(floors=[StaticResult("overlap", False, "one group in flight")], established="gpu")
    assert report.wanted(slow, None) and report.wanted(floor, None)
    assert not report.wanted(fast, None) and report.wanted(fast, True)
    emulated = _res(floors=[StaticResult("overlap", False, "one group in flight")], established="cpu-emulation")
    assert not report.wanted(emulated, None) and report.wanted(emulated, True)  # untimed: on request only
    assert not report.wanted(slow, False)
    assert not report.wanted(_res(run_status="wrong"), True)  # a wrong result's report is about the result


def test_add_why_names_the_rings_waiting_line() -> None:

    spec = specs.get("ch07_tma_ring")
    if not emu_cases.can_run(spec):
        pytest.skip("the CPU emulator cannot run here")
    file = ROOT / "solutions" / "ch07_tma_ring" / "ch07_tma_ring.cu"
    source = file.read_text()
    res = _res()
    report.add_why(res, spec, file, source)
    wait = next(i for i, ln in enumerate(source.splitlines(), 1) if answer("ch07_tma_ring", "wait(") in ln)
    assert res.why and res.why[0].startswith(f"line {wait}:") and "mbarrier wait" in res.why[0]
    assert len(res.why) <= 3
    text = str(res)
    assert "why (the emulator's trace" in text and f"line {wait}:" in text
