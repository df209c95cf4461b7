"""ch05: one warp, one 16×16×16 bf16 tile, two inline mma.sync.m16n8k16."""

from __future__ import annotations

from tklab.grading.spec_kit import BF16_MATMUL, Exercise, Launch, SassHas, TensorCoreWork, WritesGlobal, matmul_flops

SPEC = Exercise(
    id="ch05_mma",
    title="One tensor-core tile with mma.sync",
    chapter="05",
    untouched=("tensor cores used", "no tensor-core instructions"),
    solution="ch05_mma.cu",
    kernel="mma_16x16x16",
    language="cuda",
    **BF16_MATMUL,
    launch=lambda d: Launch(grid=(1,), block=(32,)),
    args=lambda a, d: (a["A"], a["B"], a["C"]),
    # Three independent random tiles: a fragment mix-up cannot pass all of them by luck.
    cases=({"M": 16, "N": 16, "K": 16, "trial": 0}, {"M": 16, "N": 16, "K": 16, "trial": 1},
           {"M": 16, "N": 16, "K": 16, "trial": 2}),
    shapes="exactly 16×16×16",
    floors=(TensorCoreWork(matmul_flops, "tensor cores (mma.sync)"),),
    static=(
        WritesGlobal(),
        SassHas(r"HMMA\.16816\.F32\.BF16(\..*)?", "tensor-core instructions (HMMA.16816.F32.BF16)",
                "issue mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 once per 8-column half",
                min_count=2, name="tensor cores used"),
    ),
)
