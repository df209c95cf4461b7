"""ch11: the consumer's step of chapter 11's Hopper FlashAttention backward (P, dS, dV, dK, dQ with wgmma).

The exercise is the main kernel, ``flash_bwd``; the check gives it what the preprocess would (D, and
the fp32 dQ accumulator zeroed) and reads dK, dV and the accumulator (dQ / scale) back.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...course import attention, attention_bwd
from ...run.arrays import bf16_to_float32, to_bf16_bits
from . import Arrays, Bench, Dims, Exercise, Launch, NoSpills, SassHas
from .ch09_flash import CASES
from .ch10_flash import NoSerializedWgmma

BUILD = attention_bwd.build(128)
D = BUILD.head_dim


def _scale() -> float:
    return 1 / math.sqrt(D)


def inputs(rng: np.random.Generator, d: Dims) -> dict[str, np.ndarray]:
    """Q, K, V, dO (bf16 bits), and what the forward and the preprocess leave: L and D = rowsum(dO o O)
    (O rounded to bf16 first, as the forward stores it)."""
    shape = (d["B"], d["H"], d["N"], D)
    x = {n: to_bf16_bits(rng.standard_normal(shape).astype(np.float32)) for n in ("Q", "K", "V", "DO")}
    f = {n: bf16_to_float32(x[n]).astype(np.float64) for n in x}
    o, lse = attention.naive(f["Q"], f["K"], f["V"], causal=bool(d["causal"]))
    o16 = bf16_to_float32(to_bf16_bits(o.astype(np.float32))).astype(np.float64)
    x["LSE"] = lse.astype(np.float32)
    x["DELTA"] = (o16 * f["DO"]).sum(-1).astype(np.float32)
    return x


def outputs(d: Dims) -> dict[str, tuple[tuple[int, ...], str]]:
    shape = (d["B"], d["H"], d["N"], D)
    return {"DK": (shape, "uint16"), "DV": (shape, "uint16"), "DQ": (shape, "float32")}


def reference(x: dict[str, np.ndarray], d: Dims) -> dict[str, np.ndarray]:
    """The kernel's products in float64 from ITS inputs (L and D as given): DQ is the accumulator, dS K."""
    q, k, v, do = (bf16_to_float32(x[n]).astype(np.float64) for n in ("Q", "K", "V", "DO"))
    c = _scale()
    p = np.exp(q @ np.swapaxes(k, -1, -2) * c - x["LSE"].astype(np.float64)[..., None])
    if d["causal"]:
        p = np.where(np.tril(np.ones(p.shape[-2:], bool)), p, 0.0)
    ds = p * (do @ np.swapaxes(v, -1, -2) - x["DELTA"].astype(np.float64)[..., None])
    return {"DK": c * np.swapaxes(ds, -1, -2) @ q, "DV": np.swapaxes(p, -1, -2) @ do, "DQ": ds @ k}


def launch(d: Dims) -> Launch:
    return Launch(grid=(-(-d["N"] // BUILD.kv_block), d["H"], d["B"]), block=(BUILD.threads,),
                  shared_mem=BUILD.shared_bytes)


def args(a: Arrays, d: Dims) -> tuple[Any, ...]:
    from ...run import tma

    a["DQ"][...] = 0  # the accumulator starts at zero (flash_bwd_prep's job in the full backward)
    maps = [tma.tensor_map(a[n], (64, D), dtype="bfloat16") for n in ("Q", "K", "V", "DO", "DK", "DV")]
    maps.append(tma.tensor_map(a["DQ"], (64, BUILD.dq_cols), dtype="float32"))
    return (*maps, a["LSE"], a["DELTA"], a["DQ"], d["H"], d["N"], np.float32(_scale()), d["causal"])


def sdpa_cudnn_backward(arrays: Arrays, d: Dims) -> Any:
    """SDPA cuDNN's backward on the same inputs, from a retained forward: ``run()`` computes dQ, dK, dV."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, do = (torch.from_dlpack(arrays[n]).view(torch.bfloat16) for n in ("Q", "K", "V", "DO"))
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        y = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=bool(d["causal"]))
    return lambda: torch.autograd.grad(y, leaves, do, retain_graph=True)


def expect_dv(arrays: Arrays, d: Dims) -> Any:
    import cupy as cp

    return cp.asarray(sdpa_cudnn_backward(arrays, d)()[2].float())


SPEC = Exercise(
    id="ch11_flash_bwd",
    title="Hopper FlashAttention backward: P, dS and the three gradient products",
    chapter="11",
    untouched=("wgmma used", "only 2 warpgroup tensor-core instructions"),
    solution="solutions/ch11_flash_bwd.cu",
    kernel="flash_bwd",
    language="cuda",
    inputs=inputs,
    outputs=outputs,
    reference=reference,
    launch=launch,
    args=args,
    cases=CASES,
    shapes="any sequence length, causal or not; d = 128; Q, K, V, dO as [batch, heads, seq, d] bf16",
    # P and dS are rounded to bf16 before the products (as in every FlashAttention backward); DQ is the
    # unscaled accumulator, sqrt(128) ~ 11x the size of dQ, so its absolute errors are too (measured on the
    # emulator: worst |error| ~0.07 on entries near zero)
    rtol=5e-2,
    atol=1.5e-1,
    arch="sm_90a",
    options=BUILD.options,
    static=(
        SassHas(r"HGMMA(\..*)?", "warpgroup tensor-core instructions (HGMMA)",
                "issue dV += P^T dO and dK += dS^T Q (warpgroup::mma_AtB) and the dQ share (mma_AB)",
                min_count=32, name="wgmma used"),
        SassHas(r"MUFU\.EX2", "fast exponentials (MUFU.EX2)", "recompute P = exp2(c S - l2) with map_row",
                min_count=16, name="exponentials"),
        NoSerializedWgmma(),
        NoSpills(),
    ),
    bench=Bench(dims={"B": 2, "H": 16, "N": 8192, "causal": 0}, baseline=sdpa_cudnn_backward,
                baseline_name="SDPA cuDNN backward", output="DV", target=None,
                flops=lambda d: attention_bwd.flops(d["B"], d["H"], d["N"], D, bool(d["causal"])),
                expect=expect_dv, rtol=5e-2, atol=5e-2),
    notes=("not yet measured on a GPU: no speed target until the reference has been timed against cuDNN",),
)
