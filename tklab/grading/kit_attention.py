"""The spec kit's attention problems (chapters 09-11): what the FlashAttention exercises share -- Q, K, V drawn as
bf16 (with the adversarial "rising" scores), O and its log-sum-exp and their float64 reference, the launch of a
``tklab.kernels.attention`` build, O's tolerance, the cases, the FLOPs, and SDPA as the library to time against.

A spec imports these (``from tklab.grading import kit_attention as attn``) instead of another exercise's spec.

Public API: ``O_TOLERANCE``, ``RISE``, ``CASES``, ``NO_SERIALIZED_WGMMA``, ``inputs(head_dim)``,
``outputs(head_dim)``, ``reference``, ``launch(build)``, ``hopper_maps(arrays, build)``, ``flops(head_dim)``,
``sdpa_baseline(backend)``, ``sdpa_flash``, ``expect_output``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..kernels import attention
from ..run.arrays import bf16_to_float32, to_bf16_bits
from .spec_kit import Arrays, Dims, Launch, NoSerializedWgmma, tensor_map

#: O's tolerance (rtol, atol in units of O's RMS, relative RMS): O's values are ~0.1-0.2 (a softmax average of
#: normal values), so the absolute 2e-2 that LSE keeps would pass a wrong O. The reference solutions of chapters 09
#: and 10 measured, emulated on their cases with two seeds: relative RMS error 1.9e-3 to 2.4e-3, largest element
#: error 0.058 x RMS(O) (bf16 O and P dominate).
O_TOLERANCE = (2e-2, 0.15, 1e-2)

#: Scores of the "rising" inputs grow by this much per key (in units of the scaled score), so a block of 64
#: keys raises every row's maximum by at least 1.33 - 2 x 0.5 and one of 176 by 3.67 - 2 x 0.5: the rest of
#: q.k is bounded by 127 x 0.2^2 / sqrt(128) = 0.45, bf16 rounding of the rising column adds at most 0.05
#: (tests/test_verdict_rules.py checks every row and block).
RISE = 1 / 48

#: The forward and backward exercises' cases (chapters 09-11). The last two: several key blocks with a causal
#: diagonal and a ragged tail; keys whose scores rise in every block (``inputs``), where the skip-the-rescale test
#: and the tail mask matter.
CASES = ({"B": 1, "H": 2, "N": 1000, "causal": 1}, {"B": 2, "H": 1, "N": 77, "causal": 0},
         {"B": 1, "H": 1, "N": 1, "causal": 1}, {"B": 1, "H": 1, "N": 4097, "causal": 0},
         {"B": 1, "H": 2, "N": 256, "causal": 1}, {"B": 1, "H": 1, "N": 400, "causal": 1},
         {"B": 1, "H": 1, "N": 400, "causal": 0, "rising": 1})


#: ptxas did not serialize the wgmma pipeline, in the words of chapters 10-11's kernels (a register A operand too).
NO_SERIALIZED_WGMMA = NoSerializedWgmma("wait for a product (mma_async_wait) before touching its accumulator or its "
                                        "register A operand")


def inputs(head_dim: int) -> Callable[[np.random.Generator, Dims], dict[str, np.ndarray]]:
    """Normal Q, K, V of ``head_dim`` (bf16 bits); with a case's ``rising``, adversarial data for the online softmax:
    every query's scores grow with the key's index, so every row's maximum rises in every key block and O must be
    rescaled in every block (an inverted "skip the rescale" test, which random data never exposes, then fails)."""

    def draw(rng: np.random.Generator, d: Dims) -> dict[str, np.ndarray]:
        shape = (d["B"], d["H"], d["N"], head_dim)
        x = {n: rng.standard_normal(shape).astype(np.float32) for n in ("Q", "K", "V")}
        if d.get("rising"):
            for n in ("Q", "K"):  # the rest of q.k: bounded noise, at most 0.45 in the scaled score
                x[n] = rng.uniform(-0.2, 0.2, size=shape).astype(np.float32)
            x["Q"][..., 0] = 1.0
            # scale * q.k ~ RISE * (key - last key): rising to 0 at the last key, so a key past the end (zero-filled,
            # score 0) would weigh as much as the heaviest real one, and a tail mask that keeps it fails
            x["K"][..., 0] = RISE * math.sqrt(head_dim) * (np.arange(d["N"], dtype=np.float32) - (d["N"] - 1))
        return {n: to_bf16_bits(v) for n, v in x.items()}

    return draw


def outputs(head_dim: int) -> Callable[[Dims], dict[str, tuple[tuple[int, ...], str]]]:
    """O (bf16 bits, [batch, heads, seq, head_dim]) and its log-sum-exp LSE (float32, [batch, heads, seq])."""
    return lambda d: {"O": ((d["B"], d["H"], d["N"], head_dim), "uint16"),
                      "LSE": ((d["B"], d["H"], d["N"]), "float32")}


def reference(x: dict[str, np.ndarray], d: Dims) -> dict[str, np.ndarray]:
    """Softmax attention, causal where the case says so, in float64."""
    q, k, v = (bf16_to_float32(x[n]).astype(np.float64) for n in ("Q", "K", "V"))
    o, lse = attention.naive(q, k, v, causal=bool(d["causal"]))
    return {"O": o, "LSE": lse}


def launch(build: attention.Build) -> Callable[[Dims], Launch]:
    """One block per query block, head and batch entry, shaped as ``build`` (its threads and shared memory)."""
    return lambda d: Launch(grid=(-(-d["N"] // build.block_rows), d["H"], d["B"]), block=(build.threads,),
                            shared_mem=build.shared_bytes)


def hopper_maps(a: Arrays, build: attention.Build) -> list[Any]:
    """The tensor maps chapter 10's kernel reads Q, K, V and writes O through (bf16): a consumer's 64 rows of Q and O,
    the build's key block (``BC`` rows) of K and V, each the head dimension wide."""
    bc = build.option("BC")
    return [tensor_map(a[n], (rows, build.head_dim), dtype="bfloat16")
            for n, rows in (("Q", 64), ("K", bc), ("V", bc), ("O", 64))]


def flops(head_dim: int) -> Callable[[Dims], float]:
    """The attention's FLOPs at a case (causal: about half), as ``tklab.kernels.attention.flops`` counts them."""
    return lambda d: attention.flops(d["B"], d["H"], d["N"], head_dim, bool(d["causal"]))


def sdpa_baseline(backend: str) -> Callable[[Arrays, Dims], Any]:
    """A Bench baseline: PyTorch's SDPA pinned to ``backend`` on the same inputs (bf16 bits viewed as bf16)."""

    def baseline(arrays: Arrays, d: Dims) -> Any:
        import torch

        q, k, v = (torch.from_dlpack(arrays[n]).view(torch.bfloat16) for n in ("Q", "K", "V"))
        return attention.sdpa(q, k, v, causal=bool(d["causal"]), backend=backend)

    return baseline


sdpa_flash = sdpa_baseline("flash")  # FlashAttention-2: chapter 09's yardstick


def expect_output(arrays: Arrays, d: Dims) -> Any:
    """SDPA flash's O on the GPU: what the learner's O at the benchmark size is held to (loosely)."""
    import cupy as cp

    return cp.asarray(sdpa_flash(arrays, d)().float())
