"""bench/sass_vs_fa4.py's reading of a loop (the events and counts chapter 11 prints from its report): on loops
written here, and on our own kernel compiled now (FlashAttention-4's side needs its package; see the script)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import sass_vs_fa4 as s  # noqa: E402

LOOP = [("SYNCS.PHASECHK.TRANS64.TRYWAIT", "P0, [UR4], R2"),
        ("HGMMA.64x80x16.F32.BF16", "R24, gdesc[UR8], RZ, !UPT"), ("HGMMA.64x80x16.F32.BF16", "R24, gdesc[UR8], R24"),
        ("WARPGROUP.DEPBAR.LE", "gsb0, 0x1"), ("MUFU.EX2", "R1, R1"), ("MUFU.EX2", "R2, R2"), ("FMUL", "R1, R1, R3"),
        ("HGMMA.64x128x16.F32.BF16", "R88, R192, gdesc[UR8].tnspB, R88"), ("BAR.SYNC.DEFER_BLOCKING", "0x5, 0x100"),
        ("STS.128", "[R0+0x100], R152"), ("STS.128", "[R0+0x900], R156"), ("IMAD", "R1, R2, R3, RZ"),
        ("WARPGROUP.DEPBAR.LE", "gsb0, 0x0"), ("BRA", "0x2100")]


def test_timeline_merges_runs_and_names_register_operands() -> None:
    assert s.timeline(LOOP) == "SYNCS.PHASECHK mma80x2 wait<=1 expx2 mma128r BAR.SYNC STS.128x2 wait<=0"


def test_profile_counts_each_group() -> None:
    p = s.profile(LOOP)
    assert (p["loop"], p["wgmma"], p["exp"], p["fp32 math"], p["shared st"], p["16-byte st"], p["int/addr"],
            p["sync"]) == (14, 3, 2, 1, 2, 2, 1, 4)


def test_our_backward_loop_reads_as_the_chapter_says() -> None:
    """The chapter kernel at d = 128: 32 wgmma, S^T and dP^T (N = 64 queries) before the first wait, dV and dK with
    A from registers, one wait for every group before dQ's stores (what section 8 compares with FlashAttention-4)."""
    loop, rows, queries = s.ours("bwd", 128, False, {})
    events = s.timeline(loop)
    assert (rows, queries) == (16, 64) and s.profile(loop)["wgmma"] == 32
    assert events.startswith("SYNCS.PHASECHK mma64x16 wait<=1 expx32 wait<=0 mma128rx4"), events
    assert "mma64x8 wait<=0" in events and events.count("wait<=") == 3, events
