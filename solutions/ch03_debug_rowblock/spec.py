"""ch03 debugging: 1D register blocking along a row of C (8 elements a thread), one bug to find."""

from __future__ import annotations

from tklab.grading.spec_kit import FP32_MATMUL, Exercise, Launch, NoSpills, UsesSharedMemory, WritesGlobal, matmul_args

SPEC = Exercise(
    id="ch03_debug_rowblock",
    title="Debugging: register blocking along a row",
    chapter="03",
    arch="sm_75",  # fp32 only: runs on every GPU the course supports
    solution="ch03_debug_rowblock.cu",
    kernel="blocktile_rows",
    language="cuda",
    **FP32_MATMUL,
    launch=lambda d: Launch(grid=(d["N"] // 64, d["M"] // 64), block=(512,)),
    args=matmul_args,
    cases=({"M": 1024, "N": 2048, "K": 512}, {"M": 128, "N": 64, "K": 16}, {"M": 64, "N": 192, "K": 24}),
    # Emulated: tall and wide, neither square, K = 2 and 3 steps: a row stride taken from the wrong dimension
    # writes past C in the first and over other rows in the second.
    emu_cases=({"M": 128, "N": 64, "K": 16}, {"M": 64, "N": 192, "K": 24}),
    shapes="M and N multiples of 64, K a multiple of 8",
    static=(WritesGlobal(), UsesSharedMemory(), NoSpills()),
)
