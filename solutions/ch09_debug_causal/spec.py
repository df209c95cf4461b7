"""ch09 debug exercise: causal attention in two passes (the maximum first, then P and P V), one bug planted."""

from __future__ import annotations

import math
from typing import Any

from tklab.grading import kit_attention as attn
from tklab.grading.spec_kit import Arrays, Dims, Exercise, NoSpills, SassHas, WritesGlobal
from tklab.kernels import attention

BUILD = attention.build("tiles", 128, WARP_ROWS=16)  # chapter 09's kernel at 16 rows a warp (launch and smem alike)
D = BUILD.head_dim


def args(a: Arrays, d: Dims) -> tuple[Any, ...]:
    n = d["N"]
    return (a["Q"], a["K"], a["V"], a["O"], a["LSE"], d["H"], n, d["H"] * n * D, n * D, D, 1 / math.sqrt(D),
            d["causal"])


# Emulated: 200 causal (2 query blocks, the diagonal in 4 key blocks, a tail of 8), 77 not causal (a ragged tail),
# 1 causal (one query, one key), 130 causal on 2 heads. Then what a GPU runs besides.
CASES = ({"B": 1, "H": 1, "N": 200, "causal": 1}, {"B": 2, "H": 1, "N": 77, "causal": 0},
         {"B": 1, "H": 1, "N": 1, "causal": 1}, {"B": 1, "H": 2, "N": 130, "causal": 1},
         {"B": 1, "H": 2, "N": 1000, "causal": 1}, {"B": 1, "H": 1, "N": 4097, "causal": 0})

SPEC = Exercise(
    id="ch09_debug_causal",
    title="Debug: causal attention in two passes, with a wrong answer",
    chapter="09",
    solution="ch09_debug_causal.cu",
    kernel="flash_two_pass",
    language="cuda",
    inputs=attn.inputs(D),
    outputs=attn.outputs(D),
    reference=attn.reference,
    launch=attn.launch(BUILD),
    args=args,
    cases=CASES,
    emu_cases=CASES[:4],
    shapes="any sequence length, causal or not; d = 128; Q, K, V as [batch, heads, seq, d] bf16",
    rtol=2e-2,
    atol=2e-2,
    by_output={"O": attn.O_TOLERANCE},
    options=BUILD.options,
    static=(
        WritesGlobal(),
        SassHas(r"HMMA(\..*)?", "tensor-core instructions (HMMA)", "keep the two mma calls",
                min_count=64, name="tensor cores used"),
        NoSpills(),
    ),
    notes=("graded on correctness only: chapter 09's ch09_flash measures the kernel's speed",),
)
