"""ch02: shared-memory tiled fp32 matmul (32×32 tiles, one element of C per thread)."""

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
    return Launch(grid=((d["N"] + 31) // 32, (d["M"] + 31) // 32), block=(32, 32))


SPEC = Exercise(
    id="ch02_smem_tiling",
    title="Shared-memory tiling",
    chapter="02",
    untouched=("uses shared memory", "never reads or writes shared memory"),
    arch="sm_75",  # fp32 only: runs on every GPU the course supports (T4 and newer)
    solution="ch02_smem_tiling.cu",
    kernel="smem_matmul",
    language="cuda",
    **FP32_MATMUL,
    launch=_launch,
    args=matmul_args,
    cases=({"M": 1024, "N": 768, "K": 512}, {"M": 33, "N": 65, "K": 47}, {"M": 1, "N": 1, "K": 100}),
    shapes="any M, N, K",
    static=(
        WritesGlobal(),
        UsesSharedMemory(),
        SassHas(r"FFMA(\..*)?", "fused multiply-adds (FFMA)", "do the TILE multiply-adds of each step out "
                "of As and Bs", min_count=8, name="FMAs from the tiles"),
        NoSpills(),
    ),
    # the reference's ratio, the check's own timing on the H200, twice (bench/results/exercises_*.json)
    bench=fp32_matmul_bench(4096, target=0.12, measured=(0.172, 0.175)),
)
