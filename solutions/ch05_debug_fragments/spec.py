"""ch05 debugging: one warp's 16x16 bf16 tile with ldmatrix and two mma.sync, one bug to find."""

from __future__ import annotations

from tklab.grading.spec_kit import BF16_MATMUL, Exercise, Launch, SassHas, TensorCoreWork, WritesGlobal, matmul_flops

SPEC = Exercise(
    id="ch05_debug_fragments",
    title="Debugging: storing a C fragment",
    chapter="05",
    solution="ch05_debug_fragments.cu",
    kernel="mma_tile",
    language="cuda",
    **BF16_MATMUL,
    launch=lambda d: Launch(grid=(1,), block=(32,)),
    args=lambda a, d: (a["A"], a["B"], a["C"]),
    cases=({"M": 16, "N": 16, "K": 16},),
    shapes="16 x 16 x 16 (one warp, one tile)",
    floors=(TensorCoreWork(matmul_flops, "tensor cores (mma.sync)"),),
    static=(
        WritesGlobal(),
        SassHas(r"HMMA(\..*)?", "tensor-core instructions (HMMA)", "keep the two mma.sync", min_count=2,
                name="tensor cores used"),
        SassHas(r"LDSM(\..*)?", "ldmatrix loads (LDSM)", "keep the ldmatrix loads", name="ldmatrix"),
    ),
)

