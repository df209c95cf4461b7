"""ch09 design exercise: a sliding-window (local) mask on chapter 09's tile kernel — which key blocks a
query block visits, which it masks, and the rows that meet only masked scores (the m = -inf case)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tklab.grading import kit_attention as attn
from tklab.grading.spec_kit import Dims, Exercise, NoSpills, SassHas, UsesSharedMemory, WritesGlobal
from tklab.kernels import attention
from tklab.run.arrays import bf16_to_float32

D = 64  # the exercise file's head dimension (HEAD_DIM): d = 64 halves what the CPU emulation computes
BUILD = attention.build("tiles", D)  # same tiles, warps and shared layout as chapter 09's kernel at d = 64


def window_mask(n: int, window: int) -> np.ndarray:
    """[n, n] booleans: query i sees key j when i - window < j <= i."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    return (j <= i) & (j > i - window)


def reference(x: dict[str, np.ndarray], d: Dims) -> dict[str, np.ndarray]:
    """Softmax attention under the window mask, in float64 (every row sees at least its own key)."""
    q, k, v = (bf16_to_float32(x[n]).astype(np.float64) for n in ("Q", "K", "V"))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(D)
    s = np.where(window_mask(d["N"], d["W"]), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    total = p.sum(axis=-1, keepdims=True)
    return {"O": (p / total) @ v, "LSE": (m + np.log(total))[..., 0]}


def args(a: dict[str, Any], d: Dims) -> tuple[Any, ...]:
    n = d["N"]
    return (a["Q"], a["K"], a["V"], a["O"], a["LSE"], np.int32(d["H"]), np.int32(n), np.int64(d["H"] * n * D),
            np.int64(n * D), np.int32(D), np.float32(1 / math.sqrt(D)), np.int32(d["W"]))


# Small ones first (they are what the CPU emulation runs): 300 keys, a 64-key window over 3 query blocks and
# a 44-key tail (whole blocks outside some warps' windows: the m = -inf rows); a window of 1 (only the
# diagonal: most rows meet a fully masked block first); a window longer than the sequence (plain causal);
# a window that is no multiple of the 64-key blocks, two heads. Then the GPU's long sequences.
CASES = ({"B": 1, "H": 1, "N": 300, "W": 64}, {"B": 1, "H": 1, "N": 130, "W": 1},
         {"B": 1, "H": 1, "N": 200, "W": 300}, {"B": 1, "H": 2, "N": 257, "W": 100},
         {"B": 2, "H": 2, "N": 4097, "W": 1000}, {"B": 1, "H": 4, "N": 2048, "W": 129},
         {"B": 1, "H": 1, "N": 1, "W": 1})

SPEC = Exercise(
    id="ch09_local_mask",
    title="Sliding-window attention: the blocks a window visits, its mask, and rows that see nothing yet",
    chapter="09",
    design=True,
    untouched=("tensor cores used", "visit any key block"),
    solution="ch09_local_mask.cu",
    kernel="flash_fwd_local",
    language="cuda",
    inputs=attn.inputs(D),
    outputs=attn.outputs(D),
    reference=reference,
    launch=attn.launch(BUILD),
    args=args,
    cases=CASES,
    shapes="any sequence length and window >= 1 (query i sees keys i - window + 1 .. i); d = 64; "
           "Q, K, V as [batch, heads, seq, d] bf16",
    rtol=2e-2,
    atol=2e-2,
    options=BUILD.options,
    static=(
        WritesGlobal(),
        UsesSharedMemory(),
        SassHas(r"MUFU\.EX2", "fast exponentials (MUFU.EX2, from fast::exp2)", "write the online-softmax "
                "update with fast::exp2, in a loop that visits the key blocks (kv_begin < kv_end)",
                min_count=16, name="exponentials"),
        SassHas(r"HMMA(\..*)?", "tensor-core instructions (HMMA)", "the products of the key loop were compiled "
                "away: does the loop visit any key block (kv_begin < kv_end)?",
                min_count=64, name="tensor cores used"),
        NoSpills(),
    ),
    notes=("graded on correctness only: there is no speed target for this exercise",),
)
