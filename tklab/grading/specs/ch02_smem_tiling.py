"""ch02: shared-memory tiled fp32 matmul (32×32 tiles, one element of C per thread)."""

from __future__ import annotations

from ..spec_kit import (
    Bench,
    Dims,
    Exercise,
    Launch,
    NoSpills,
    SassHas,
    UsesSharedMemory,
    WritesGlobal,
    cupy_matmul,
    matmul_args,
    matmul_flops,
    matmul_inputs,
    matmul_outputs,
    matmul_reference,
)


def _launch(d: Dims) -> Launch:
    return Launch(grid=((d["N"] + 31) // 32, (d["M"] + 31) // 32), block=(32, 32))


SPEC = Exercise(
    id="ch02_smem_tiling",
    title="Shared-memory tiling",
    chapter="02",
    untouched=("uses shared memory", "never reads or writes shared memory"),
    arch="sm_75",  # fp32 only: runs on every GPU the course supports (T4 and newer)
    solution="solutions/ch02_smem_tiling.cu",
    kernel="smem_matmul",
    language="cuda",
    inputs=matmul_inputs,
    outputs=matmul_outputs,
    reference=matmul_reference,
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
    bench=Bench(dims={"M": 4096, "N": 4096, "K": 4096}, baseline=cupy_matmul,
                baseline_name="cuBLAS fp32 (cupy.matmul)", output="C", target=0.12, flops=matmul_flops,
                measured=(0.172, 0.175)),  # H200: 78f7203 (bench/results/exercises_2026-11-29_78f7203.json), d0cbc8f
)
