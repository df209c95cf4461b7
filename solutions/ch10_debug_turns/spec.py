"""ch10 debug exercise: a warp-specialised GEMM whose two consumers take turns on the tensor cores (one bug planted)."""

from __future__ import annotations

from tklab.grading.spec_kit import (
    BF16_MATMUL,
    Exercise,
    Launch,
    NoSerializedWgmma,
    NoSpills,
    SassHas,
    TakesTurns,
    WritesGlobal,
    tma_matmul_args,
)
from tklab.kernels import gemm

STEP = gemm.STEPS["2_warp_specialised"]  # chapter 08's block, which this one follows: its tile, threads and boxes
BM, BN, BK, CONSUMERS, STAGES = STEP.block_m, STEP.block_n, gemm.BK, 2, 4
# The kernel exports gemm_shared_bytes; the sandboxed run cannot compile the solution to read it.
SHARED = STAGES * (CONSUMERS * 64 * BK + BK * BN) * 2 + 1024

# Emulated: 10 K-slices through 4 stages (ten turns each, the ring wrapping twice), first with the TMA loads landing
# in reverse order; 2 tiles down M with 3 slices; one slice (one turn each). Then the GPU's sizes.
CASES = ({"M": 128, "N": 256, "K": 640, "tma_order": 1}, {"M": 256, "N": 256, "K": 192},
         {"M": 128, "N": 256, "K": 64}, {"M": 1024, "N": 1024, "K": 1024}, {"M": 384, "N": 768, "K": 640})

SPEC = Exercise(
    id="ch10_debug_turns",
    title="Debug: two consumers taking turns on the tensor cores",
    chapter="10",
    solution="ch10_debug_turns.cu",
    kernel="gemm",
    language="cuda",
    **BF16_MATMUL,
    launch=lambda d: Launch(grid=(d["M"] // BM * (d["N"] // BN),), block=((CONSUMERS + 1) * 128,),
                            shared_mem=SHARED),
    args=tma_matmul_args(*gemm.tma_boxes(STEP)),
    cases=tuple({k: v for k, v in c.items() if k != "tma_order"} for c in CASES),
    emu_cases=CASES[:3],
    shapes="M a multiple of 128, N of 256, K of 64",
    options=("-DC_TYPE=float",),
    floors=(TakesTurns(products="the step's products"),),
    static=(
        WritesGlobal(),
        SassHas(r"HGMMA(\..*)?", "wgmma instructions (HGMMA)", "keep the consumers' warpgroup::mma_AB",
                min_count=4, name="tensor cores used (wgmma)"),
        NoSerializedWgmma(),
        NoSpills(),
    ),
    notes=("the turns are judged on what executed (every wgmma inside its turn), not on time",),
    arch="sm_90a",
)
