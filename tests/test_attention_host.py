"""bench/attention_host.py on a machine without a GPU: its cProfile digest names the functions that spent the time,
and the command refuses with a sentence where torch or a GPU is missing (the numbers themselves come from a GPU)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
HOST = load_script(ROOT / "bench" / "attention_host.py", "attention_host_bench")


def _slow_part() -> None:
    time.sleep(0.002)


def _fast_part() -> int:
    return sum(range(10))


def _call() -> None:
    _slow_part()
    _fast_part()


def test_the_profile_digest_names_where_the_time_went() -> None:
    """By own time the sleep leads (it is where the time went); by cumulative time the call that contains it does."""
    by_time, by_cum = HOST.profile_text(_call, 5, 10)
    for table in (by_time, by_cum):
        assert table.splitlines()[0].split()[:2] == ["ncalls", "tottime"], table[:200]  # the table, no header lines
        assert "_slow_part" in table and "_fast_part" in table
    assert "time.sleep" in by_time.splitlines()[1], by_time
    assert by_cum.splitlines()[1].endswith("(_call)"), by_cum


def test_without_a_gpu_it_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a GPU is here: the bench would run")
    except ImportError:
        pass
    assert HOST.main([]) == 2
    assert "needs an H100/H200 GPU and torch" in capsys.readouterr().err
