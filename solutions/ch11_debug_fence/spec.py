"""ch11 debug exercise: dV = P^T dO of attention's backward in one warpgroup, P rebuilt from L (one bug planted)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tklab.grading.spec_kit import (
    Arrays,
    Dims,
    Exercise,
    Launch,
    NoSerializedWgmma,
    NoSpills,
    SassHas,
    WritesGlobal,
    tensor_map,
)
from tklab.run.arrays import bf16_to_float32, to_bf16_bits

D = 64  # the kernel's HEAD_DIM
ROWS = 64  # query rows per step and keys per block
SHARED = (ROWS * D * (1 + 2 * 2) + ROWS * ROWS) * 2 + 2048  # K, Q and dO in two stages, P; alignment, barriers


def _scores(x: dict[str, np.ndarray], d: Dims) -> np.ndarray:
    """scale * Q K^T of every head in float64, -inf where a causal mask hides a key: [B, H, N, N]."""
    q, k = (bf16_to_float32(x[n]).astype(np.float64) for n in ("Q", "K"))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(D)
    if d["causal"]:
        s = np.where(np.tril(np.ones((d["N"], d["N"]), bool)), s, -np.inf)
    return s


def inputs(rng: np.random.Generator, d: Dims) -> dict[str, np.ndarray]:
    """Normal Q, K, dO (bf16 bits, [B, H, N, D]) and the forward's log-sum-exp L of those Q and K (fp32)."""
    shape = (d["B"], d["H"], d["N"], D)
    x = {n: to_bf16_bits(rng.standard_normal(shape).astype(np.float32)) for n in ("Q", "K", "dO")}
    s = _scores(x, d)
    top = s.max(axis=-1, keepdims=True)
    x["L"] = (top + np.log(np.exp(s - top).sum(axis=-1, keepdims=True)))[..., 0].astype(np.float32)
    return x


def reference(x: dict[str, np.ndarray], d: Dims) -> dict[str, np.ndarray]:
    """dV = P^T dO with P = exp(scale Q K^T - L), in float64."""
    p = np.exp(_scores(x, d) - x["L"].astype(np.float64)[..., None])
    return {"dV": np.swapaxes(p, -1, -2) @ bf16_to_float32(x["dO"]).astype(np.float64)}


def args(a: Arrays, d: Dims) -> tuple[Any, ...]:
    def rows(n: str) -> Any:  # every head's rows one after another: a 2-D map of 64 x D boxes
        return tensor_map(a[n].reshape(-1, D), (ROWS, D), dtype="bfloat16")

    return (rows("Q"), rows("K"), rows("dO"), a["L"], a["dV"], np.int32(d["N"]), np.float32(1 / math.sqrt(D)),
            np.int32(d["causal"]))


# Emulated: 256 causal (4 key blocks, from 4 query blocks down to 1; the ring wraps), 192 not causal on 2 heads
# and 2 batch entries, one block. Then a GPU's sizes.
CASES = ({"B": 1, "H": 1, "N": 256, "causal": 1}, {"B": 2, "H": 2, "N": 192, "causal": 0},
         {"B": 1, "H": 1, "N": 64, "causal": 1}, {"B": 2, "H": 8, "N": 2048, "causal": 1},
         {"B": 1, "H": 4, "N": 4096, "causal": 0})

SPEC = Exercise(
    id="ch11_debug_fence",
    title="Debug: dV of the backward in one warpgroup, P through shared memory",
    chapter="11",
    solution="ch11_debug_fence.cu",
    kernel="attn_bwd_dv",
    language="cuda",
    inputs=inputs,
    outputs=lambda d: {"dV": ((d["B"], d["H"], d["N"], D), "float32")},
    reference=reference,
    launch=lambda d: Launch(grid=(d["N"] // ROWS, d["B"] * d["H"]), block=(128,), shared_mem=SHARED),
    args=args,
    cases=CASES,
    emu_cases=CASES[:3],
    shapes="N a multiple of 64, causal or not; d = 64; Q, K, dO as [batch, heads, seq, d] bf16",
    # dV's values are small (a column of P sums to at most the number of queries times 1/N): a relative-RMS bound
    by_output={"dV": (2e-2, 0.15, 1e-2)},
    static=(
        WritesGlobal(),
        SassHas(r"HGMMA(\..*)?", "wgmma instructions (HGMMA)", "keep the two warpgroup products",
                min_count=2, name="tensor cores used (wgmma)"),
        NoSerializedWgmma(),
        NoSpills(),
    ),
    notes=("graded on correctness only: chapter 11's ch11_flash_bwd measures the backward's speed",),
    arch="sm_90a",
)
