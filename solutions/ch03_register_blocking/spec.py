"""ch03: 2D register blocking (8×8 per thread, 128×128 per block) with float4 loads."""

from __future__ import annotations

from tklab.grading.spec_kit import (
    FP32_MATMUL,
    Dims,
    Exercise,
    Launch,
    NoSpills,
    SassHas,
    UsesSharedMemory,
    WritesGlobal,
    fp32_matmul_bench,
    matmul_args,
)


def _launch(d: Dims) -> Launch:
    return Launch(grid=(d["N"] // 128, d["M"] // 128), block=(256,))


SPEC = Exercise(
    id="ch03_register_blocking",
    title="Register blocking with float4 loads",
    chapter="03",
    untouched=("float4 global loads", "no 128-bit global loads"),
    arch="sm_75",  # fp32 only: runs on every GPU the course supports (T4 and newer)
    solution="ch03_register_blocking.cu",
    kernel="regblock_matmul",
    language="cuda",
    **FP32_MATMUL,
    launch=_launch,
    args=matmul_args,
    cases=({"M": 1024, "N": 1024, "K": 512}, {"M": 128, "N": 128, "K": 8}, {"M": 256, "N": 384, "K": 72}),
    # Emulated: nine steps along K first, as it is also the case a GPU check emulates for hazards (a missing
    # __syncthreads after the outer products races only from the second step on).
    emu_cases=({"M": 256, "N": 384, "K": 72}, {"M": 128, "N": 128, "K": 8}),
    shapes="M and N multiples of 128, K a multiple of 8",
    static=(
        WritesGlobal(),
        UsesSharedMemory(),
        SassHas(r"LDG(\.[A-Z0-9_]+)*\.128(\..*)?", "128-bit global loads (LDG.E.128)",
                "load A and B with float4 (reinterpret_cast<const float4*>)", name="float4 global loads"),
        SassHas(r"LDS(\.[A-Z0-9_]+)*\.128(\..*)?", "128-bit shared loads (LDS.128)",
                "read each thread's 8 values of As[k] and Bs[k] as two float4s", name="float4 shared loads"),
        SassHas(r"FFMA(\..*)?", "fused multiply-adds (FFMA)", "8 steps of an 8×8 outer product are 512 per "
                "tile step; unroll the k, i and j loops (#pragma unroll) so acc stays in registers",
                min_count=512, name="unrolled outer products"),
        NoSpills(),
    ),
    # the reference's ratio, the check's own timing on the H200, twice (bench/results/exercises_*.json)
    bench=fp32_matmul_bench(4096, target=0.5, measured=(0.781, 0.779)),
)
