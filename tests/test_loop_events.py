"""tklab.toolchain.loop_events, the reading of a main loop that bench/sass_vs_fa4.py writes its reports with and
chapters 10 and 11 print: on loops written here, on our own kernel compiled now, and the learner's step set beside
the reference and FlashAttention-4's (``beside``): stub, missing, not compiling, and filled in."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from tklab.course import loops
from tklab.toolchain import loop_events

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import sass_vs_fa4 as s  # noqa: E402

REPORT = ROOT / "bench" / "results" / "sass_vs_fa4_2026-12-05_0f4d383.md"

LOOP = [("SYNCS.PHASECHK.TRANS64.TRYWAIT", "P0, [UR4], R2"),
        ("HGMMA.64x80x16.F32.BF16", "R24, gdesc[UR8], RZ, !UPT"), ("HGMMA.64x80x16.F32.BF16", "R24, gdesc[UR8], R24"),
        ("WARPGROUP.DEPBAR.LE", "gsb0, 0x1"), ("MUFU.EX2", "R1, R1"), ("MUFU.EX2", "R2, R2"), ("FMUL", "R1, R1, R3"),
        ("HGMMA.64x128x16.F32.BF16", "R88, R192, gdesc[UR8].tnspB, R88"), ("BAR.SYNC.DEFER_BLOCKING", "0x5, 0x100"),
        ("STS.128", "[R0+0x100], R152"), ("STS.128", "[R0+0x900], R156"), ("IMAD", "R1, R2, R3, RZ"),
        ("WARPGROUP.DEPBAR.LE", "gsb0, 0x0"), ("BRA", "0x2100")]


def test_timeline_merges_runs_and_names_register_operands() -> None:
    assert loop_events.events(LOOP) == "SYNCS.PHASECHK mma80x2 wait<=1 expx2 mma128r BAR.SYNC STS.128x2 wait<=0"


def test_profile_counts_each_group() -> None:
    p = loop_events.counts(LOOP)
    assert (p["loop"], p["wgmma"], p["exp"], p["fp32 math"], p["shared st"], p["16-byte st"], p["int/addr"],
            p["sync"]) == (14, 3, 2, 1, 2, 2, 1, 4)


def test_our_backward_loop_reads_as_the_chapter_says() -> None:
    """The chapter kernel at d = 128: 32 wgmma, S^T and dP^T (N = 64 queries) before the first wait, dV and dK with
    A from registers, dQ's part issued before dK and stored after a wait that leaves dK's group running, then the
    wait for every group (FlashAttention-4's order, what section 8 compares)."""
    loop, rows, queries = s.ours("bwd", 128, False, {})
    events = loop_events.events(loop)
    assert (rows, queries) == (16, 64) and loop_events.counts(loop)["wgmma"] == 32
    assert events.startswith("SYNCS.PHASECHK mma64x16 wait<=1 expx32 wait<=0 mma128rx4"), events
    assert "BAR.SYNC mma64x8 mma128rx4 wait<=1" in events and events.count("wait<=") == 4, events
    stores = events.split("mma128rx4 wait<=1")[-1].split("wait<=0")[0]
    assert "STS" in stores, events  # dQ's part goes to shared memory while dK runs


def test_beside_sets_the_learners_step_by_the_references_and_fa4s(tmp_path: Path) -> None:
    """The stub, a missing file and a file that does not compile each say so; a filled-in file (the reference
    itself, copied) prints the reference's events as yours; FlashAttention-4's line is the report's."""
    from tklab.grading import exercises as ex

    folder = tmp_path / "exercises"
    folder.mkdir()
    missing = loops.beside("ch11_flash_bwd", REPORT, exercises_dir=folder)
    assert "exercises/ch11_flash_bwd.cu is missing" in missing
    shutil.copy(ex.EXERCISES / "ch11_flash_bwd.cu", folder)  # the generated stub
    stub = loops.beside("ch11_flash_bwd", REPORT, exercises_dir=folder)
    assert "still the stub" in stub and "yours" not in stub
    fa4 = loops.report_line(REPORT, "bwd", 128, "FlashAttention-4")[1]
    assert fa4.split()[0] in stub and "the chapter's reference:" in stub
    solution = (ex.SOLUTIONS / "ch11_flash_bwd" / "ch11_flash_bwd.cu").read_text()
    (folder / "ch11_flash_bwd.cu").write_text(solution)
    filled = loops.beside("ch11_flash_bwd", REPORT, exercises_dir=folder)
    ref, yours = filled.split("the chapter's reference:\n")[1].split("yours (exercises/ch11_flash_bwd.cu):\n")
    assert " ".join(ref.split()) == " ".join(yours.split()), filled
    (folder / "ch11_flash_bwd.cu").write_text(solution.replace("warpgroup::mm_ABt(s_t,", "warpgroup::mm_ABt(s_t"))
    broken = loops.beside("ch11_flash_bwd", REPORT, exercises_dir=folder)
    assert "did not compile" in broken and "yours" not in broken


def test_beside_reads_the_forward_too() -> None:
    """Chapter 10's key loop: FlashAttention-4's forward line from the report, the reference's loop (all of its
    exponentials between the two waits), the learner's stub named as such."""
    text = loops.beside("ch10_flash", REPORT, kind="fwd")
    fa4 = loops.report_line(REPORT, "fwd", 128, "FlashAttention-4")[1]
    ref = " ".join(text.split("the chapter's reference:\n")[1].split("exercises/")[0].split())
    assert fa4.split()[2] in text and re.search(r"wait<=1 expx\d+ SYNCS\.ARRIVE wait<=0", ref), text
    assert "exercises/ch10_flash.cu is still the stub" in text
