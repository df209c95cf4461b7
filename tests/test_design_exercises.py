"""The design exercises of chapters 07-10 (issue 25, item 3): the learner writes something the chapter
explained but never showed. Each one's verdict is held to a planted-mistake suite: every typical mistake
below FAILS and every benign variant PASSES, on the CPU emulator here (no GPU) and on a GPU there (the
``gpu`` twins). That the solution passes and the untouched exercise fails is tests/test_check.py's, for
every exercise.

On the CPU every test run checks each suite's core (6 mistakes, 2 benign variants: what CI can afford);
``TKLAB_DESIGN_FULL=1`` runs the rest there too, and a GPU always runs all of them.

A mistake is a literal edit of the solution (old text -> new text); the old text must occur exactly once,
so a mistake that silently stopped applying fails its test instead of passing for the wrong reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tklab import gpu, specs
from tklab.grading import cases as emu_cases
from tklab.grading import emulated, spoilers
from tklab.grading.check import check

ROOT = Path(__file__).resolve().parent.parent
NO_GPU = not gpu.available()
FULL = os.environ.get("TKLAB_DESIGN_FULL", "") in ("1", "true", "yes")  # every variant on the CPU, not the core


@dataclass(frozen=True)
class Edit:
    """One planted variant of a solution: ``name`` says what a learner did; ``edits`` are (old, new) pairs."""

    name: str
    edits: tuple[tuple[str, str], ...]
    cpu_gap: str = ""  # why the CPU emulator cannot see this mistake yet (reported; the test stays, xfail strict)
    core: bool = True  # run on the CPU in every test run; the others with TKLAB_DESIGN_FULL=1 (and on a GPU)

    def apply(self, text: str) -> str:
        for old, new in self.edits:
            assert text.count(old) == 1, f"{self.name}: {old!r} occurs {text.count(old)} times in the solution"
            text = text.replace(old, new)
        return text


def edit(name: str, *pairs: tuple[str, str], cpu_gap: str = "") -> Edit:
    return Edit(name, tuple(pairs), cpu_gap)


def extra(name: str, *pairs: tuple[str, str], cpu_gap: str = "") -> Edit:
    """A variant beyond the core of its suite: on the CPU only with TKLAB_DESIGN_FULL=1 (CI time), always on
    a GPU."""
    return Edit(name, tuple(pairs), cpu_gap, core=False)


# ---- ch09_local_mask ------------------------------------------------------------------------------------
L_BEGIN = "const int kv_begin = max(q_block * BR - window + 1, 0) / BC;"
L_END = "const int kv_end = min(q_block * BR + BR - 1, seq - 1) / BC + 1;"
L_WHEN = "if (col0 + BC - 1 > row0 || col0 <= row0 + WARP_ROWS - 1 - window)"
L_PRED = "return c > r || c <= r - window;"
L_GUARD = "map(m_use, m, [](float x) { return x == neg_inf ? 0.0f : x; });"

LOCAL_MISTAKES = (
    edit("no -inf guard: a row's first block fully masked gives NaN", (L_GUARD, "copy(m_use, m);")),
    extra("guard only the rescale factor, not P", (L_GUARD, "copy(m_use, m);"),
         ("map_row(s, s, m_use,", "map_row(s, s, m,")),
    edit("window one key too wide (c < r - window)", (L_PRED, "return c > r || c < r - window;")),
    extra("window one key too narrow (c <= r - window + 1)", (L_PRED, "return c > r || c <= r - window + 1;")),
    edit("no causal edge: keys after the query are seen", (L_PRED, "return c <= r - window;")),
    edit("mask only the diagonal blocks (the window's start is never masked)",
         (L_WHEN, "if (col0 + BC - 1 > row0)")),
    edit("first block rounded up: a partly visible block is skipped",
         (L_BEGIN, "const int kv_begin = (max(q_block * BR - window + 1, 0) + BC - 1) / BC;")),
    edit("last block dropped (no + 1)", (L_END, "const int kv_end = min(q_block * BR + BR - 1, seq - 1) / BC;")),
    extra("first block from the last row's window: the first rows lose keys",
         (L_BEGIN, "const int kv_begin = max(q_block * BR + BR - window, 0) / BC;")),
    extra("masked scores set to 0 instead of -inf", (L_PRED + " }, neg_inf);", L_PRED + " }, 0.0f);")),
)
LOCAL_BENIGN = (
    edit("mask every visited block", (L_WHEN, "if (true)")),
    extra("visit every block from 0 (no block skipping below the window)", (L_BEGIN, "const int kv_begin = 0;")),
    extra("end not clamped to the sequence (the extra block is zero-filled and masked)",
         (L_END, "const int kv_end = (q_block * BR + BR - 1) / BC + 1;")),
    extra("a block wholly outside this warp's windows skipped (no product, no update)",
          ("        const int col0 = j * BC;\n", "        const int col0 = j * BC;\n"
           "        if (col0 > row0 + WARP_ROWS - 1 || col0 + BC - 1 <= row0 - window) continue;\n")),
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
    extra("no empty wait: a stage is refilled while consumers read it", (R_WAIT, "")),
    extra("stage and lap from the tile index t, not the producer's count i",
         ("                const int s = i % STAGES;", "                const int s = t % STAGES;"),
         (R_WAIT, "wait(empty[s], ((t / STAGES) & 1) ^ 1);")),
    extra("expect half the tile's bytes", (R_EXPECT, "arrive_expect_bytes(full[s], tma::bytes<tile> / 2);")),
    extra("expect twice the tile's bytes", (R_EXPECT, "arrive_expect_bytes(full[s], tma::bytes<tile> * 2);")),
    edit("no expect: the full barrier never hears of the bytes", (R_EXPECT, "")),
    edit("empty barrier counts one arrival (freed by the first warp)", (R_EMPTY, "init_mbarrier(empty[s], 1); ")),
    extra("full barrier counts one arrival per consumer warp", (R_FULL, "init_mbarrier(full[s], CONSUMER_WARPS); ")),
    extra("every lane arrives on empty (32 per warp)",
         (R_RELEASE, "        arrive(empty[s]);\n")),
    edit("hand-back before the stage is read", (R_RELEASE, ""),
         ("        float4 v[PER_LANE];\n", R_RELEASE + "        float4 v[PER_LANE];\n")),
    edit("one lane hands back without __syncwarp (the warp's other lanes may still read)",
         (R_RELEASE, "        if (laneid() == 0) arrive(empty[s]);\n")),
    edit("tile coordinates swapped",
         (R_LOAD, "tma::load_async(stage[s], map_src, full[s], {t % tiles_c, t / tiles_c});")),
    extra("no hand-back at all", (R_RELEASE, "")),
)
RING_BENIGN = (
    edit("the bytes written out: arrive_expect_bytes with tma::bytes", (R_EXPECT,
         "arrive_expect_bytes(full[s], tma::bytes<tile>);")),
    edit("every lane hands back, the empty barrier counts 32 per warp",
         (R_EMPTY, "init_mbarrier(empty[s], CONSUMER_WARPS * WARP_THREADS); "),
         (R_RELEASE, "        arrive(empty[s]);\n")),
    extra("the parity kept in a variable flipped at each lap's end", (R_WAIT,
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
    extra("no mapping: the query head indexes K and V (past the last K/V head)", (G_HEAD, "const int kv_h = h;")),
    edit("K from the group's head, V from the query head", (G_V, G_V.replace("kv_h", "h"))),
    extra("V from the group's head, K from the query head", (G_K, G_K.replace("kv_h", "h"))),
    edit("head and key block swapped in the TMA coordinates", (G_K, G_K.replace("{b, kv_h, j, 0}", "{b, j, kv_h, 0}")),
         (G_V, G_V.replace("{b, kv_h, j, 0}", "{b, j, kv_h, 0}"))),
    edit("the producer's empty waits with the consumers' parity", (G_KWAIT, G_KWAIT.replace(" ^ 1", "")),
         (G_VWAIT, G_VWAIT.replace(" ^ 1", ""))),
    edit("no wait for a free V stage (refilled while P V may read it)", (G_VWAIT, "")),
    extra("V's bytes never announced", (G_VEXPECT, "arrive(sm.v_pipe.full[at.stage]);")),
)
GQA_BENIGN = (
    edit("the group from the K/V head count (h * kv_heads / heads)",
         (G_HEAD, "const int kv_h = h * kv_heads / heads;")),
    edit("both loads of a block after both waits", (G_KWAIT, G_KWAIT + G_VWAIT),
         (G_VWAIT + "                tma::expect(sm.v", "                tma::expect(sm.v")),
)

# ---- ch08_warp_specialized ------------------------------------------------------------------------------
W_SPLIT = "using split = warpgroup::register_split<40, 232, CONSUMERS>;"
W_EMPTY = "wait(pipe.empty[at.stage], at.phase ^ 1);"
W_EXPECT = "tma::expect(pipe.full[at.stage], s.a[0], s.a[1], s.b);"
W_A = "tma::load_async(s.a[w], map_a, pipe.full[at.stage], {tile.r * CONSUMERS + w, k});"
W_B = "tma::load_async(s.b, map_b, pipe.full[at.stage], {k, tile.c});"
W_FULL = "            wait(pipe.full[at.stage], at.phase);\n"
W_MMA = "warpgroup::mma_AB(acc, stages[at.stage].a[me], stages[at.stage].b, k > 0);"
W_WAIT = "            warpgroup::mma_async_wait<0>();  // the group is done: its stage goes back to the producer\n"
W_RELEASE = "            pipe.release(at.stage);\n"

WS_MISTAKES = (
    edit("the split over the register file (consumers 240)", (W_SPLIT, W_SPLIT.replace("232", "240"))),
    extra("the split backwards (producer 232, consumers 40)", (W_SPLIT, W_SPLIT.replace("<40, 232", "<232, 40"))),
    edit("the producer's empty wait with the consumers' parity", (W_EMPTY, "wait(pipe.empty[at.stage], at.phase);")),
    edit("expect the bytes of one half of A only", (W_EXPECT, "tma::expect(pipe.full[at.stage], s.a[0], s.b);")),
    extra("both consumers' halves of A from the same rows", (W_A, W_A.replace("tile.r * CONSUMERS + w", "tile.r"))),
    extra("B's coordinates swapped", (W_B, W_B.replace("{k, tile.c}", "{tile.c, k}"))),
    edit("no wait for a full stage: wgmma reads bytes still in flight", (W_FULL, "")),
    extra("the full wait with the producer's parity", (W_FULL, W_FULL.replace("at.phase", "at.phase ^ 1"))),
    edit("the stage handed back before its product is waited for", (W_WAIT + W_RELEASE, W_RELEASE + W_WAIT)),
    extra("no wait in the loop: the stage handed back while wgmma may read it", (W_WAIT, "")),
    edit("always accumulate (the poisoned accumulator is never overwritten)", (W_MMA, W_MMA.replace("k > 0", "true"))),
    extra("accumulate flag off by one (k > 1)", (W_MMA, W_MMA.replace("k > 0", "k > 1"))),
    extra("both consumers multiply the first half of A", (W_MMA, W_MMA.replace(".a[me]", ".a[0]"))),
    extra("every thread arrives on empty (the barrier counts warps)",
         (W_RELEASE, "            arrive(pipe.empty[at.stage]);\n")),
)
WS_BENIGN = (
    edit("a smaller split that still fits (producer 24, consumers 240)",
         (W_SPLIT, W_SPLIT.replace("<40, 232", "<24, 240"))),
    edit("one wgmma group left in flight: the previous stage handed back", (W_WAIT + W_RELEASE,
         "            warpgroup::mma_async_wait<1>();  // the previous group is done: its stage goes back\n"
         "            if (k > 0) pipe.release((at.stage + STAGES - 1) % STAGES);\n"),
         ("        wgmma::fence_operands(acc);      // ... and acc's reads stay below that wait\n",
          "        wgmma::fence_operands(acc);      // ... and acc's reads stay below that wait\n"
          "        if (k_tiles > 0) pipe.release((at.stage + STAGES - 1) % STAGES);\n")),
    extra("the accumulator zeroed by the first slice's flag written out", (W_MMA,
         "warpgroup::mma_AB(acc, stages[at.stage].a[me], stages[at.stage].b, k != 0);")),
)

SUITES = {"ch07_ring_protocol": (RING_MISTAKES, RING_BENIGN), "ch09_local_mask": (LOCAL_MISTAKES, LOCAL_BENIGN),
          "ch08_warp_specialized": (WS_MISTAKES, WS_BENIGN), "ch10_gqa": (GQA_MISTAKES, GQA_BENIGN)}
MISTAKES = [(i, e) for i, (bad, _) in SUITES.items() for e in bad]
CPU_MISTAKES = [pytest.param(i, e, id=f"{i}:{e.name}",
                             marks=[pytest.mark.xfail(strict=True, reason=e.cpu_gap)] if e.cpu_gap else [])
                for i, e in MISTAKES]
BENIGN = [(i, e) for i, (_, good) in SUITES.items() for e in good]


def _planted(tmp_path: Path, exercise: str, variant: Edit) -> Path:
    spec = specs.get(exercise)
    f = tmp_path / spec.filename
    f.write_text(variant.apply((ROOT / spec.solution).read_text()))
    return f


def _cpu(exercise: str, variant: Edit) -> None:
    if not NO_GPU:
        pytest.skip("a GPU is here: the gpu twins run these")
    if not emu_cases.can_run(specs.get(exercise)):
        pytest.skip("no C++ compiler for the CPU emulator")
    if not (variant.core or FULL):
        pytest.skip("beyond the suite's core: TKLAB_DESIGN_FULL=1 runs it on the CPU (a GPU always does)")


def test_every_suite_is_big_enough() -> None:
    """Issue 25: at least 6 typical mistakes and 2 benign variants per design exercise, all of them in the
    core that every CPU test run checks."""
    assert set(SUITES) == {i for i in specs.all_ids() if specs.get(i).design}  # every design exercise has one
    for exercise, (bad, good) in SUITES.items():
        assert sum(e.core for e in bad) >= 6 and sum(e.core for e in good) >= 2, exercise
        assert specs.get(exercise).chapter in ("07", "08", "09", "10")


# The launch each spec computes (the sandboxed run cannot compile the solution to read it) against what the
# kernel exports, compiled here for sm_90a: (spec attribute or function of a case, exported name).
SHARED = {
    "ch07_ring_protocol": ("ring_shared_bytes", lambda sp: sp.launch({"M": 1, "N": 4}).shared_mem),
    "ch08_warp_specialized": ("gemm_shared_bytes", lambda sp: sp.launch({"M": 128, "N": 256, "K": 64}).shared_mem),
    "ch09_local_mask": ("flash_shared_bytes", lambda sp: sp.launch({"B": 1, "H": 1, "N": 1, "W": 1}).shared_mem),
    "ch10_gqa": ("flash_shared_bytes",
                 lambda sp: sp.launch({"B": 1, "H": 1, "HKV": 1, "N": 1, "causal": 0}).shared_mem),
}


@pytest.mark.parametrize("exercise", sorted(SHARED))
def test_the_launch_asks_for_the_shared_memory_the_kernel_exports(exercise: str) -> None:
    import tklab

    spec = specs.get(exercise)
    name, launched = SHARED[exercise]
    mod = tklab.compile((ROOT / spec.solution).read_text(), arch="sm_90a", name=spec.filename, options=spec.options)
    assert mod.constants[name] == launched(spec)


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


@pytest.mark.parametrize("exercise, variant", CPU_MISTAKES)
def test_planted_mistake_fails_on_the_cpu(tmp_path: Path, exercise: str, variant: Edit) -> None:
    _cpu(exercise, variant)
    res = check(exercise, _planted(tmp_path, exercise, variant), bench=False)
    assert res.passed is False, res
    if res.compiled and res.static_ok:  # the run must have caught it, on the emulator
        assert res.run_where == emulated.LABEL and res.run_status in ("wrong", "error"), res


@pytest.mark.parametrize("exercise, variant", BENIGN, ids=[f"{i}:{e.name}" for i, e in BENIGN])
def test_benign_variant_passes_on_the_cpu(tmp_path: Path, exercise: str, variant: Edit) -> None:
    _cpu(exercise, variant)
    res = check(exercise, _planted(tmp_path, exercise, variant), bench=False)
    assert res.passed is True, res


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("exercise, variant", MISTAKES, ids=[f"{i}:{e.name}" for i, e in MISTAKES])
def test_planted_mistake_fails_on_the_gpu(tmp_path: Path, exercise: str, variant: Edit) -> None:
    res = check(exercise, _planted(tmp_path, exercise, variant), bench=False)
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
