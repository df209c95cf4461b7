"""ch10 design exercise: grouped-query attention on chapter 10's Hopper kernel — which K/V head a query
head reads, in the producer's rank-4 TMA coordinates, streamed through the two rings."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tklab.grading import kit_attention as attn
from tklab.grading.spec_kit import Arrays, Dims, Exercise, Launch, NoSpills, SassHas, TensorCoreWork, WritesGlobal
from tklab.kernels import attention
from tklab.run.arrays import bf16_to_float32, to_bf16_bits

BUILD = attention.build("hopper", 128)  # chapter 10's d = 128 geometry: 2 consumer warpgroups, its key blocks
D = BUILD.head_dim
OPTIONS = tuple(o for o in BUILD.options if not o.startswith("-DSCHEDULE"))  # this copy has the plain loop only


def inputs(rng: np.random.Generator, d: Dims) -> dict[str, np.ndarray]:
    q = rng.standard_normal((d["B"], d["H"], d["N"], D)).astype(np.float32)
    k, v = (rng.standard_normal((d["B"], d["HKV"], d["N"], D)).astype(np.float32) for _ in range(2))
    return {"Q": to_bf16_bits(q), "K": to_bf16_bits(k), "V": to_bf16_bits(v)}


def reference(x: dict[str, np.ndarray], d: Dims) -> dict[str, np.ndarray]:
    """Every query head h attends with K/V head h // (H / HKV), in float64."""
    q, k, v = (bf16_to_float32(x[n]).astype(np.float64) for n in ("Q", "K", "V"))
    group = d["H"] // d["HKV"]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    o, lse = attention.naive(q, k, v, causal=bool(d["causal"]))
    return {"O": o, "LSE": lse}


def launch(d: Dims) -> Launch:
    if d["H"] % d["HKV"]:
        raise ValueError(f"kv_heads ({d['HKV']}) must divide heads ({d['H']})")
    return attn.launch(BUILD)(d)


def args(a: Arrays, d: Dims) -> tuple[Any, ...]:
    return (*attn.hopper_maps(a, BUILD), a["LSE"], np.int32(d["H"]), np.int32(d["HKV"]), np.int32(d["N"]),
            np.float32(1 / math.sqrt(D)), np.int32(d["causal"]))


# Small ones first (the CPU emulation runs those): groups of 2 with a causal tail; groups of 3 (a mapping
# that only works for groups of 2 fails); multi-query attention (one K/V head) over 3 key blocks, so each
# ring wraps; plain multi-head attention. Then the GPU's long sequences.
CASES = ({"B": 1, "H": 4, "HKV": 2, "N": 100, "causal": 1}, {"B": 2, "H": 6, "HKV": 2, "N": 40, "causal": 0},
         {"B": 1, "H": 2, "HKV": 1, "N": 360, "causal": 0}, {"B": 1, "H": 2, "HKV": 2, "N": 64, "causal": 1},
         {"B": 2, "H": 16, "HKV": 4, "N": 1000, "causal": 1}, {"B": 1, "H": 8, "HKV": 1, "N": 4097, "causal": 0})

SPEC = Exercise(
    id="ch10_gqa",
    title="Grouped-query attention on Hopper: the K/V head of a query head, in the producer's TMA coordinates",
    chapter="10",
    design=True,
    untouched=("K and V loads", "only 4 TMA loads"),
    solution="ch10_gqa.cu",
    kernel="flash_fwd_gqa",
    language="cuda",
    inputs=inputs,
    outputs=attn.outputs(D),
    reference=reference,
    launch=launch,
    args=args,
    cases=CASES,
    shapes="heads a multiple of kv_heads; any sequence length, causal or not; d = 128; Q, O as [batch, heads, "
           "seq, d] and K, V as [batch, kv_heads, seq, d] bf16",
    rtol=2e-2,
    atol=2e-2,
    arch="sm_90a",
    options=OPTIONS,
    floors=(TensorCoreWork(attn.flops(D)),),
    static=(
        WritesGlobal(),
        SassHas(r"UTMALDG(\..*)?", "TMA loads (UTMALDG) of Q, K and V", "the producer streams every key block "
                "of K and of V with tma::load_async", min_count=6, name="K and V loads"),
        SassHas(r"HGMMA(\..*)?", "warpgroup tensor-core instructions (HGMMA)", "keep the consumers' products",
                min_count=16, name="wgmma used"),
        attn.NO_SERIALIZED_WGMMA,
        NoSpills(),
    ),
    notes=("graded on correctness only: the exercise keeps the plain schedule, so it has no speed target",),
)
