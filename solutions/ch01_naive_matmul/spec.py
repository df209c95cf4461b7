"""ch01: naive fp32 matmul in numba.cuda, one thread per element of C (runs in the simulator on CPU)."""

from __future__ import annotations

import re

from tklab.grading.spec_kit import FP32_MATMUL, AssignsTo, Dims, Exercise, Launch, fp32_matmul_bench


def uncoalesced_order(source: str) -> str | None:
    """``row, col = cuda.grid(2)`` then ``C[row, col]``: x (the fast index of a warp) walks down a column of
    C and B, so a warp's 32 accesses hit 32 rows: uncoalesced. The simulator cannot time that; say it."""
    m = re.search(r"\b(\w+)\s*,\s*(\w+)\s*=\s*cuda\.grid\(\s*2\s*\)", source)
    if m is None:
        return None
    x, y = m.groups()
    if re.search(rf"\bC\[\s*{re.escape(x)}\s*,\s*{re.escape(y)}\s*\]", source) is None:
        return None
    return (f"speed: `{x}, {y} = cuda.grid(2)` gives {x} the x index, which neighbouring threads of a warp "
            f"differ in, and C[{x}, {y}] puts it on the rows: a warp's 32 writes (and its reads of B) land in 32 "
            "different rows, so none coalesce. Right, but slow on a GPU: chapter 01, section 3, says which index "
            "follows x, and chapter 02 measures both orders")


def _launch(d: Dims) -> Launch:
    return Launch(grid=((d["N"] + 15) // 16, (d["M"] + 15) // 16), block=(16, 16))


SPEC = Exercise(
    id="ch01_naive_matmul",
    title="Naive matrix multiply in numba.cuda",
    chapter="01",
    untouched=("writes its output", "never assigns to C"),
    arch="sm_75",  # fp32 only: runs on every GPU the course supports (T4 and newer)
    solution="ch01_naive_matmul.py",
    kernel="matmul",
    language="numba",
    **FP32_MATMUL,
    launch=_launch,
    args=lambda a, d: (a["A"], a["B"], a["C"]),
    # The first GPU case is the main size; the others are ragged edges (not multiples of 16), one with M > K
    # and one with M < K: a dot product over the wrong length reads past A's rows and B's end on a GPU
    # (no bounds checks), where memory that happens to hold zeros made a loop over M pass with M > K alone
    # (bench/results/planted_mistakes_gpu_*.md); with M < K it misses terms. Then a skinny
    # output each way (M >> N, M << N, K equal to neither): the grid is sized ceil(N/16) blocks along x and
    # ceil(M/16) along y, so with the row and column indices swapped (`row, col = cuda.grid(2)`) the threads
    # cover only 16 rows of a 40 x 7 C, or 16 columns of a 7 x 40 one; nearly square shapes hide that.
    cases=({"M": 512, "N": 512, "K": 512}, {"M": 37, "N": 53, "K": 29}, {"M": 29, "N": 53, "K": 37},
           {"M": 40, "N": 7, "K": 29}, {"M": 7, "N": 40, "K": 29}),
    # The simulator runs every thread as a Python thread: keep these tiny (a block or four).
    sim_cases=({"M": 5, "N": 7, "K": 3}, {"M": 17, "N": 18, "K": 4}, {"M": 40, "N": 7, "K": 5},
               {"M": 7, "N": 40, "K": 5}),
    shapes="any M, N, K",
    static=(AssignsTo("C"),),
    remarks=(uncoalesced_order,),
    # the reference's ratio, the check's own timing on the H200, twice (bench/results/exercises_*.json)
    bench=fp32_matmul_bench(2048, target=0.02, measured=(0.0269, 0.027)),
)
