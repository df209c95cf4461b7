"""ch08 challenge: a skinny GEMM (M = 64 rows, N = K = 8192), as fast as the learner can make it; checked for
correctness, timed against cuBLAS bf16 in the same run (the class leaderboard's ratio: tklab.grading.leaderboard)."""

from __future__ import annotations

import numpy as np

from tklab.grading import leaderboard
from tklab.grading.spec_kit import (
    BF16_MATMUL,
    Bench,
    Exercise,
    Launch,
    WritesGlobal,
    bf16_matmul_baseline,
    bf16_matmul_expect,
    matmul_flops,
    tensor_map,
)
from tklab.run.limits import SHARED_OPTIN

ID = "ch08_challenge_gemm_skinny"
TILE = 64  # one block per TILE x TILE tile of C; A's and B's TMA boxes are TILE x TILE (64 bf16: 128-byte rows)
#: the launch gives every block sm_90's opt-in shared memory less 1 KiB for static ``__shared__`` variables (an
#: mbarrier per stage): how deep a ring is, is the learner's choice
SHARED = SHARED_OPTIN[90] - 1024
#: the benchmark: a batch of 64 tokens through an 8192 x 8192 layer (the chapter tuned square 4096^3 and 8192^3)
BENCH_DIMS = {"M": 64, "N": 8192, "K": 8192}


def _launch(d: dict[str, int]) -> Launch:
    bad = [f"{k}={d[k]}" for k in ("M", "N", "K") if d[k] % TILE or d[k] <= 0]
    if bad:
        raise ValueError(f"{ID} takes M, N and K multiples of {TILE}: {', '.join(bad)}")
    return Launch(grid=(d["N"] // TILE, d["M"] // TILE), block=(128,), shared_mem=SHARED)


def _args(a: dict, d: dict[str, int]) -> tuple:
    return (tensor_map(a["A"], (TILE, TILE), dtype="bfloat16"), tensor_map(a["B"], (TILE, TILE), dtype="bfloat16"),
            a["A"], a["B"], a["C"], np.int32(d["M"]), np.int32(d["N"]), np.int32(d["K"]))


SPEC = Exercise(
    id=ID,
    title="Challenge: a skinny GEMM (64 x 8192 x 8192), as fast as you can make it",
    chapter="08",
    untouched=("writes its output", "never stores to global memory"),
    solution=f"{ID}.cu",
    kernel="gemm_skinny",
    language="cuda",
    **BF16_MATMUL,
    launch=_launch,
    args=_args,
    # the benchmark's shape first; then a few tiles of C over several K-slices, rows of tiles, one tile
    cases=(BENCH_DIMS, {"M": 128, "N": 256, "K": 1024}, {"M": 64, "N": 128, "K": 640}, {"M": 64, "N": 64, "K": 64}),
    # Emulated: 2 x 2 tiles over 12 K-slices (a ring of up to 8 stages wraps), the TMA loads landing in reverse order
    # first (a missing wait shows), then as late as each mbarrier allows; one tile of one slice.
    emu_cases=({"M": 128, "N": 128, "K": 768, "tma_order": 1}, {"M": 128, "N": 128, "K": 768},
               {"M": 64, "N": 64, "K": 64}),
    shapes="M, N and K multiples of 64 (the benchmark: M = 64, N = K = 8192)",
    static=(WritesGlobal(), leaderboard.RecordedNumbers(ID)),
    bench=Bench(dims=BENCH_DIMS, baseline=bf16_matmul_baseline, baseline_name="cuBLAS bf16 (torch.matmul)",
                output="C", flops=matmul_flops, expect=bf16_matmul_expect, rtol=1e-2, atol=1e-1),
    arch="sm_90a",
)
