"""ch10 challenge: sliding-window attention at d = 128 (causal, each query sees the last ``W`` keys), as fast as the
learner can make it; checked for correctness, timed against PyTorch's SDPA given the window as a boolean mask in
the same run (the class leaderboard's ratio: tklab.grading.leaderboard)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tklab.grading import kit_attention as attn
from tklab.grading import leaderboard
from tklab.grading.spec_kit import Arrays, Bench, Dims, Exercise, Launch, WritesGlobal
from tklab.run.arrays import bf16_to_float32

ID = "ch10_challenge_swa"
D = 128
ROWS = 64  # query rows per block (the launch's grid)
SHARED = 100 * 1024  # dynamic shared memory per block: two blocks of 128 threads fit an SM
BENCH_DIMS = {"B": 2, "H": 16, "N": 8192, "W": 1024}


def window_mask(n: int, w: int) -> np.ndarray:
    """[n, n] bool: query i sees key j when i - w < j <= i."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    return (j <= i) & (j > i - w)


def inputs(rng: np.random.Generator, d: Dims) -> dict[str, np.ndarray]:
    return attn.inputs(D)(rng, d)


def reference(x: dict[str, np.ndarray], d: Dims) -> dict[str, np.ndarray]:
    """Softmax attention inside the window, in float64: O and the natural log-sum-exp of each row."""
    q, k, v = (bf16_to_float32(x[n]).astype(np.float64) for n in ("Q", "K", "V"))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(D)
    s = np.where(window_mask(d["N"], d["W"]), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    total = e.sum(axis=-1, keepdims=True)
    return {"O": (e / total) @ v, "LSE": (m + np.log(total))[..., 0]}


def launch(d: Dims) -> Launch:
    if d["W"] < 1:
        raise ValueError(f"{ID}: the window must hold at least the query's own key (W >= 1), got W={d['W']}")
    return Launch(grid=(-(-d["N"] // ROWS), d["H"], d["B"]), block=(128,), shared_mem=SHARED)


def args(a: Arrays, d: Dims) -> tuple[Any, ...]:
    return (a["Q"], a["K"], a["V"], a["O"], a["LSE"], np.int32(d["H"]), np.int32(d["N"]), np.int32(d["W"]),
            np.float32(1 / math.sqrt(D)))


def sdpa_window(arrays: Arrays, d: Dims) -> Any:
    """The library: PyTorch's SDPA on the same inputs, the window given as a boolean mask (SDPA picks its backend;
    FlashAttention and cuDNN take no mask, so it is the memory-efficient kernel)."""
    import torch

    q, k, v = (torch.from_dlpack(arrays[n]).view(torch.bfloat16) for n in ("Q", "K", "V"))
    i = torch.arange(d["N"], device=q.device)
    mask = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - d["W"])
    return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def expect_output(arrays: Arrays, d: Dims) -> Any:
    import cupy as cp

    return cp.asarray(sdpa_window(arrays, d)().float())


def flops(d: Dims) -> float:
    """4 d per (query, key) pair inside the window (S and P V): what the kernel must do, not what a mask wastes."""
    n, w = d["N"], min(d["W"], d["N"])
    pairs = w * (w + 1) // 2 + (n - w) * w
    return 4.0 * d["B"] * d["H"] * pairs * D


SPEC = Exercise(
    id=ID,
    title="Challenge: sliding-window attention at d = 128, as fast as you can make it",
    chapter="10",
    untouched=("writes its output", "never stores to global memory"),
    solution=f"{ID}.cu",
    kernel="flash_swa",
    language="cuda",
    inputs=inputs,
    outputs=attn.outputs(D),
    reference=reference,
    launch=launch,
    args=args,
    # windows across several key blocks, a window inside one block, the diagonal only, a window longer than the
    # sequence (plain causal), a ragged tail; rising scores (the rescale must happen). Not the benchmark's shape: its
    # float64 reference on the CPU would hold 32 matrices of 8192 x 8192 (tens of GB); the timed run compares that
    # shape's O with the library's on the GPU (Bench.expect).
    cases=({"B": 1, "H": 2, "N": 1000, "W": 300}, {"B": 1, "H": 1, "N": 3000, "W": 1024},
           {"B": 2, "H": 1, "N": 77, "W": 16}, {"B": 1, "H": 1, "N": 130, "W": 1},
           {"B": 1, "H": 1, "N": 200, "W": 4096}, {"B": 1, "H": 1, "N": 300, "W": 100, "rising": 1}),
    # Emulated: 4 query blocks and windows that cross key blocks at both edges, the tail of 44 rows; a window shorter
    # than a warp's rows (rows that meet a block of nothing but masked keys); the diagonal only; rising scores.
    emu_cases=({"B": 1, "H": 1, "N": 236, "W": 70}, {"B": 2, "H": 1, "N": 77, "W": 5},
               {"B": 1, "H": 1, "N": 130, "W": 1}, {"B": 1, "H": 1, "N": 200, "W": 100, "rising": 1}),
    shapes="any sequence length, any window >= 1; d = 128; Q, K, V, O as [batch, heads, seq, d] bf16",
    rtol=2e-2,
    atol=2e-2,
    by_output={"O": attn.O_TOLERANCE},
    static=(WritesGlobal(), leaderboard.RecordedNumbers(ID)),
    bench=Bench(dims=BENCH_DIMS, baseline=sdpa_window, baseline_name="SDPA with the window as a mask", output="O",
                flops=flops, expect=expect_output, rtol=2e-2, atol=2e-2),
    arch="sm_90a",
)
