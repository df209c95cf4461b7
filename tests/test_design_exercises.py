"""The design exercises of chapters 07-10 (issue 25, item 3): the learner writes something the chapter
explained but never showed. Each one's verdict is held to a planted-mistake suite: every typical mistake
below FAILS and every benign variant PASSES, on the CPU emulator here (no GPU) and on a GPU there (the
``gpu`` twins). The solution passes and the untouched exercise fails.

A mistake is a literal edit of the solution (old text -> new text); the old text must occur exactly once,
so a mistake that silently stopped applying fails its test instead of passing for the wrong reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tklab import gpu, specs
from tklab.emulate import exercise as emulated
from tklab.grading import spoilers
from tklab.grading.check import check

ROOT = Path(__file__).resolve().parent.parent
NO_GPU = not gpu.available()


@dataclass(frozen=True)
class Edit:
    """One planted variant of a solution: ``name`` says what a learner did; ``edits`` are (old, new) pairs."""

    name: str
    edits: tuple[tuple[str, str], ...]

    def apply(self, text: str) -> str:
        for old, new in self.edits:
            assert text.count(old) == 1, f"{self.name}: {old!r} occurs {text.count(old)} times in the solution"
            text = text.replace(old, new)
        return text


def edit(name: str, *pairs: tuple[str, str]) -> Edit:
    return Edit(name, tuple(pairs))


# ---- ch09_local_mask ------------------------------------------------------------------------------------
L_BEGIN = "const int kv_begin = max(q_block * BR - window + 1, 0) / BC;"
L_END = "const int kv_end = min(q_block * BR + BR - 1, seq - 1) / BC + 1;"
L_WHEN = "if (col0 + BC - 1 > row0 || col0 <= row0 + WARP_ROWS - 1 - window)"
L_PRED = "return c > r || c <= r - window;"
L_GUARD = "map(m_use, m, [](float x) { return x == neg_inf ? 0.0f : x; });"

LOCAL_MISTAKES = (
    edit("no -inf guard: a row's first block fully masked gives NaN", (L_GUARD, "copy(m_use, m);")),
    edit("guard only the rescale factor, not P", (L_GUARD, "copy(m_use, m);"),
         ("map_row(s, s, m_use,", "map_row(s, s, m,")),
    edit("window one key too wide (c < r - window)", (L_PRED, "return c > r || c < r - window;")),
    edit("window one key too narrow (c <= r - window + 1)", (L_PRED, "return c > r || c <= r - window + 1;")),
    edit("no causal edge: keys after the query are seen", (L_PRED, "return c <= r - window;")),
    edit("mask only the diagonal blocks (the window's start is never masked)",
         (L_WHEN, "if (col0 + BC - 1 > row0)")),
    edit("first block rounded up: a partly visible block is skipped",
         (L_BEGIN, "const int kv_begin = (max(q_block * BR - window + 1, 0) + BC - 1) / BC;")),
    edit("last block dropped (no + 1)", (L_END, "const int kv_end = min(q_block * BR + BR - 1, seq - 1) / BC;")),
    edit("first block from the last row's window: the first rows lose keys",
         (L_BEGIN, "const int kv_begin = max(q_block * BR + BR - window, 0) / BC;")),
    edit("masked scores set to 0 instead of -inf", (L_PRED + " }, neg_inf);", L_PRED + " }, 0.0f);")),
)
LOCAL_BENIGN = (
    edit("mask every visited block", (L_WHEN, "if (true)")),
    edit("visit every block from 0 (no block skipping below the window)", (L_BEGIN, "const int kv_begin = 0;")),
    edit("end not clamped to the sequence (the extra block is zero-filled and masked)",
         (L_END, "const int kv_end = (q_block * BR + BR - 1) / BC + 1;")),
    edit("a large finite stand-in for -inf",
         (L_GUARD, "map(m_use, m, [](float x) { return fmaxf(x, -1e30f); });")),
)

# ---- ch07_ring_protocol ---------------------------------------------------------------------------------
R_FULL = "init_mbarrier(full[s], 1); "
R_EMPTY = "init_mbarrier(empty[s], CONSUMER_WARPS); "
R_WAIT = "wait(empty[s], ((i / STAGES) & 1) ^ 1);"
R_EXPECT = "tma::expect(full[s], stage[s]);"
R_LOAD = "tma::load_async(stage[s], map_src, full[s], {t / tiles_c, t % tiles_c});"
R_RELEASE = "        __syncwarp();\n        if (laneid() == 0) arrive(empty[s]);\n"

RING_MISTAKES = (
    edit("producer's empty wait with the consumers' parity (lap % 2)", (R_WAIT, "wait(empty[s], (i / STAGES) & 1);")),
    edit("no empty wait: a stage is refilled while consumers read it", (R_WAIT, "")),
    edit("stage and lap from the tile index t, not the producer's count i",
         ("                const int s = i % STAGES;", "                const int s = t % STAGES;"),
         (R_WAIT, "wait(empty[s], ((t / STAGES) & 1) ^ 1);")),
    edit("expect half the tile's bytes", (R_EXPECT, "arrive_expect_bytes(full[s], tma::bytes<tile> / 2);")),
    edit("expect twice the tile's bytes", (R_EXPECT, "arrive_expect_bytes(full[s], tma::bytes<tile> * 2);")),
    edit("no expect: the full barrier never hears of the bytes", (R_EXPECT, "")),
    edit("empty barrier counts one arrival (freed by the first warp)", (R_EMPTY, "init_mbarrier(empty[s], 1); ")),
    edit("full barrier counts one arrival per consumer warp", (R_FULL, "init_mbarrier(full[s], CONSUMER_WARPS); ")),
    edit("every lane arrives on empty (32 per warp)",
         (R_RELEASE, "        arrive(empty[s]);\n")),
    edit("hand-back before the stage is read", (R_RELEASE, ""),
         ("        float4 v[PER_LANE];\n", R_RELEASE + "        float4 v[PER_LANE];\n")),
    edit("one lane hands back without __syncwarp (the warp's other lanes may still read)",
         (R_RELEASE, "        if (laneid() == 0) arrive(empty[s]);\n")),
    edit("tile coordinates swapped",
         (R_LOAD, "tma::load_async(stage[s], map_src, full[s], {t % tiles_c, t / tiles_c});")),
    edit("no hand-back at all", (R_RELEASE, "")),
)
RING_BENIGN = (
    edit("the bytes written out: arrive_expect_bytes with tma::bytes", (R_EXPECT,
         "arrive_expect_bytes(full[s], tma::bytes<tile>);")),
    edit("every lane hands back, the empty barrier counts 32 per warp",
         (R_EMPTY, "init_mbarrier(empty[s], CONSUMER_WARPS * WARP_THREADS); "),
         (R_RELEASE, "        arrive(empty[s]);\n")),
    edit("the parity kept in a variable flipped at each lap's end", (R_WAIT,
         "wait(empty[s], (i / STAGES) % 2 == 0 ? 1u : 0u);")),
)

# ---- ch10_gqa -------------------------------------------------------------------------------------------
G_HEAD = "const int kv_h = h / (heads / kv_heads);"
G_K = "tma::load_async(sm.k[at.stage], map_k, sm.k_pipe.full[at.stage], {b, kv_h, j, 0});"
G_V = "tma::load_async(sm.v[at.stage], map_v, sm.v_pipe.full[at.stage], {b, kv_h, j, 0});"
G_KWAIT = "                wait(sm.k_pipe.empty[at.stage], at.phase ^ 1);\n"
G_VWAIT = "                wait(sm.v_pipe.empty[at.stage], at.phase ^ 1);\n"
G_VEXPECT = "tma::expect(sm.v_pipe.full[at.stage], sm.v[at.stage]);"

GQA_MISTAKES = (
    edit("heads interleaved over the K/V heads (h % kv_heads)", (G_HEAD, "const int kv_h = h % kv_heads;")),
    edit("divided by the number of K/V heads, not the group size (h / kv_heads)",
         (G_HEAD, "const int kv_h = h / kv_heads;")),
    edit("no mapping: the query head indexes K and V (past the last K/V head)", (G_HEAD, "const int kv_h = h;")),
    edit("K from the group's head, V from the query head", (G_V, G_V.replace("kv_h", "h"))),
    edit("V from the group's head, K from the query head", (G_K, G_K.replace("kv_h", "h"))),
    edit("head and key block swapped in the TMA coordinates", (G_K, G_K.replace("{b, kv_h, j, 0}", "{b, j, kv_h, 0}")),
         (G_V, G_V.replace("{b, kv_h, j, 0}", "{b, j, kv_h, 0}"))),
    edit("the producer's empty waits with the consumers' parity", (G_KWAIT, G_KWAIT.replace(" ^ 1", "")),
         (G_VWAIT, G_VWAIT.replace(" ^ 1", ""))),
    edit("no wait for a free V stage (refilled while P V may read it)", (G_VWAIT, "")),
    edit("V's bytes never announced", (G_VEXPECT, "arrive(sm.v_pipe.full[at.stage]);")),
)
GQA_BENIGN = (
    edit("the group from the K/V head count (h * kv_heads / heads)",
         (G_HEAD, "const int kv_h = h * kv_heads / heads;")),
    edit("both loads of a block after both waits", (G_KWAIT, G_KWAIT + G_VWAIT),
         (G_VWAIT + "                tma::expect(sm.v", "                tma::expect(sm.v")),
)

SUITES = {"ch07_ring_protocol": (RING_MISTAKES, RING_BENIGN), "ch09_local_mask": (LOCAL_MISTAKES, LOCAL_BENIGN),
          "ch10_gqa": (GQA_MISTAKES, GQA_BENIGN)}
MISTAKES = [(i, e) for i, (bad, _) in SUITES.items() for e in bad]
BENIGN = [(i, e) for i, (_, good) in SUITES.items() for e in good]


def _planted(tmp_path: Path, exercise: str, variant: Edit) -> Path:
    spec = specs.get(exercise)
    f = tmp_path / spec.filename
    f.write_text(variant.apply((ROOT / spec.solution).read_text()))
    return f


def _cpu(exercise: str) -> None:
    if not NO_GPU:
        pytest.skip("a GPU is here: the gpu twins run these")
    if not emulated.can_run(specs.get(exercise)):
        pytest.skip("no C++ compiler for the CPU emulator")


def test_every_suite_is_big_enough() -> None:
    for exercise, (bad, good) in SUITES.items():
        assert len(bad) >= 6 and len(good) >= 2, exercise
        assert specs.get(exercise).chapter in ("07", "08", "09", "10")


@pytest.mark.parametrize("exercise", sorted(SUITES))
def test_the_design_file_gives_away_no_exercise(exercise: str) -> None:
    """A design exercise reuses its chapter's kernel: its learner's copy must not hold the answer lines of
    its chapter's exercises or later ones (they sit in the learner's folder beside it from the start). An
    earlier chapter's answer may show: chapter 10's kernel holds chapter 09's update, as ch10_flash's does."""
    spec = specs.get(exercise)
    text = (ROOT / "exercises" / spec.exercise_file).read_text()
    hits = [(other, h.line, h.answer) for other in specs.all_ids() if specs.get(other).chapter >= spec.chapter
            for h in spoilers.scan(text, spoilers.answer_lines(specs.get(other)))]
    assert not hits, hits


@pytest.mark.parametrize("exercise", sorted(SUITES))
def test_solution_passes_and_untouched_exercise_fails_on_the_cpu(exercise: str) -> None:
    _cpu(exercise)
    spec = specs.get(exercise)
    res = check(exercise, ROOT / spec.solution, bench=False)
    assert res.passed is True and res.established == "cpu-emulation", res
    stub = check(exercise, ROOT / "exercises" / spec.filename, bench=False)
    assert stub.compiled and stub.passed is False, stub


@pytest.mark.parametrize("exercise, variant", MISTAKES, ids=[f"{i}:{e.name}" for i, e in MISTAKES])
def test_planted_mistake_fails_on_the_cpu(tmp_path: Path, exercise: str, variant: Edit) -> None:
    _cpu(exercise)
    res = check(exercise, _planted(tmp_path, exercise, variant), bench=False)
    assert res.compiled, res
    assert res.passed is False and res.run_where == emulated.LABEL, res  # failed in the run, not statically
    assert res.run_status in ("wrong", "error"), res


@pytest.mark.parametrize("exercise, variant", BENIGN, ids=[f"{i}:{e.name}" for i, e in BENIGN])
def test_benign_variant_passes_on_the_cpu(tmp_path: Path, exercise: str, variant: Edit) -> None:
    _cpu(exercise)
    res = check(exercise, _planted(tmp_path, exercise, variant), bench=False)
    assert res.passed is True, res


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("exercise, variant", MISTAKES, ids=[f"{i}:{e.name}" for i, e in MISTAKES])
def test_planted_mistake_fails_on_the_gpu(tmp_path: Path, exercise: str, variant: Edit) -> None:
    res = check(exercise, _planted(tmp_path, exercise, variant), bench=False)
    assert res.compiled, res
    assert res.passed is False, res


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("exercise, variant", BENIGN, ids=[f"{i}:{e.name}" for i, e in BENIGN])
def test_benign_variant_passes_on_the_gpu(tmp_path: Path, exercise: str, variant: Edit) -> None:
    res = check(exercise, _planted(tmp_path, exercise, variant), bench=False)
    assert res.passed is True, res


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("exercise", sorted(SUITES))
def test_solution_passes_and_untouched_exercise_fails_on_the_gpu(exercise: str) -> None:
    spec = specs.get(exercise)
    assert check(exercise, ROOT / spec.solution, bench=False).passed is True
    stub = check(exercise, ROOT / "exercises" / spec.filename, bench=False)
    assert stub.compiled and stub.passed is False, stub
