"""Issue 26: timings log the SM clock beside them (course.results.compare), read from nvidia-smi."""

from __future__ import annotations

import importlib
import subprocess

results = importlib.import_module("tklab.course.results")  # the module (course.results is the table function)


def test_parse_clock_reads_nvidia_smis_answer() -> None:
    assert results.parse_clock("1755\n") == 1755
    assert results.parse_clock(" 1980 \n1980\n") == 1980  # one line per GPU: the first
    assert results.parse_clock("[N/A]\n") is None
    assert results.parse_clock("") is None
    assert results.parse_clock("NVIDIA-SMI has failed because it couldn't communicate with the driver") is None


def test_no_nvidia_smi_means_no_clock(monkeypatch) -> None:
    def missing(*a, **k):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(subprocess, "run", missing)
    assert results.sm_clock_mhz() is None


def test_compare_records_the_clock_after_timing(monkeypatch) -> None:
    """On a GPU, compare's record carries sm_clock_mhz (here the timing and the GPU are stand-ins)."""
    from tklab.run import bench

    class Timed:
        ms = 2.0

    monkeypatch.setattr(bench, "bench", lambda fn, **k: Timed())
    monkeypatch.setattr(results, "sm_clock_mhz", lambda device=0: 1755)
    monkeypatch.setattr(results.recorded, "measure", lambda key, fn: fn())
    rec = results.compare("test.clock", lambda: None, lambda: None, flops=2e12, label="x")
    assert rec["sm_clock_mhz"] == 1755 and rec["tflops"] == 1000.0
