"""ch11: the consumer's step of chapter 11's Hopper FlashAttention backward, with the keys as rows (S^T, dP^T,
P^T and dS^T in registers, dV and dK with a register A operand, dS^T handed over for dQ).

The exercise is the main kernel, ``flash_bwd``; the check gives it what the first pass would (L log2 e and D laid
out per step, ``attention_bwd.host_stats``, and the fp32 dQ accumulator zeroed) and reads dK, dV and the
accumulator (dQ / scale) back, as the kernel leaves it: at d = 128 (DQ_FRAGMENTS) each step's two parts in register
order, compared with the reference parked the same way (``attention_bwd.park_dq``). It builds the file twice: at
d = 128 (64-query steps, each consumer forming dQ's columns; timed) and at d = 64 (``D64``, one of
``SPEC.builds``: 128-query steps, each consumer forming dQ's rows).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from tklab.grading import kit_attention as attn
from tklab.grading.spec_kit import Arrays, Bench, Dims, Exercise, Launch, NoSpills, SassHas, TensorCoreWork, tensor_map
from tklab.kernels import attention, attention_bwd
from tklab.run.arrays import bf16_to_float32, to_bf16_bits

#: The chapter's kernel (the one the learner writes) per head dimension: the check's own build, and the d = 64
#: build (128-query steps, N = 128 products, dQ by rows).
BUILDS = {128: attention_bwd.build(128), 64: attention_bwd.build(64)}
assert all(b.swapab for b in BUILDS.values()), "the exercise is the chapter's file (FlashAttention-3's layout)"
BUILD = BUILDS[128]
D = BUILD.head_dim


def _head(d: Dims) -> int:
    """A case's head dimension: its ``D`` (the d = 64 build's cases say so), else the main build's."""
    return int(d.get("D", D))


def _scale(head: int) -> float:
    return 1 / math.sqrt(head)


#: Above this many score entries (B * H * N * N) L and D come from a blockwise float32 pass (on the GPU when one
#: is here) instead of the float64 N x N matrices: at the benchmark size (2 x 16 x 8192^2) those are 17 GB and
#: took about a minute per input set on the H200's host, so the timed check ran out of time.
EXACT_LIMIT = 1 << 26


def forward_stats(q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, causal: bool, *,
                  rows: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """L (log-sum-exp of scale * S per row) and D = rowsum(dO o O), O rounded to bf16 as the forward stores it,
    from float32 inputs, ``rows`` query rows at a time per (batch, head): never the N x N matrix. Runs on the
    GPU with CuPy where a GPU is present (the benchmark's inputs), else with NumPy."""
    try:
        import cupy as xp

        if xp.cuda.runtime.getDeviceCount() < 1:
            raise ImportError
    except Exception:  # noqa: BLE001 - no CuPy or no GPU: the same pass on the CPU
        xp = np  # type: ignore[assignment]
    b, h, n, _ = q.shape
    c = np.float32(_scale(q.shape[-1]))
    lse = np.empty((b, h, n), np.float32)
    delta = np.empty((b, h, n), np.float32)
    for bi in range(b):
        for hi in range(h):
            qh, kh, vh, doh = (xp.asarray(x[bi, hi], dtype=np.float32) for x in (q, k, v, do))
            for r0 in range(0, n, rows):
                s = (qh[r0:r0 + rows] @ kh.T) * c
                if causal:
                    r = xp.arange(r0, min(r0 + rows, n))[:, None]
                    s = xp.where(xp.arange(n)[None, :] <= r, s, -xp.inf)
                m = s.max(axis=1, keepdims=True)
                e = xp.exp(s - m)
                total = e.sum(axis=1, keepdims=True)
                o = (e @ vh) / total
                o16 = xp.asarray(bf16_to_float32(to_bf16_bits(_host(xp, o))))
                lse[bi, hi, r0:r0 + rows] = _host(xp, (m + xp.log(total))[:, 0])
                delta[bi, hi, r0:r0 + rows] = _host(xp, (o16 * doh[r0:r0 + rows]).sum(axis=1))
    return lse, delta


def _host(xp: Any, x: Any) -> np.ndarray:
    return x if xp is np else xp.asnumpy(x)


def inputs(rng: np.random.Generator, d: Dims) -> dict[str, np.ndarray]:
    """Q, K, V, dO (bf16 bits), and what the forward and the preprocess leave: L and D = rowsum(dO o O)
    (O rounded to bf16 first, as the forward stores it): exact (float64) for the checked cases, blockwise in
    float32 at the benchmark's size (``forward_stats``)."""
    shape = (d["B"], d["H"], d["N"], _head(d))
    x = {n: to_bf16_bits(rng.standard_normal(shape).astype(np.float32)) for n in ("Q", "K", "V", "DO")}
    if d["B"] * d["H"] * d["N"] ** 2 > EXACT_LIMIT:
        x["LSE"], x["DELTA"] = forward_stats(*(bf16_to_float32(x[n]) for n in ("Q", "K", "V", "DO")),
                                             bool(d["causal"]))
        return _with_stats(x, d)
    f = {n: bf16_to_float32(x[n]).astype(np.float64) for n in x}
    o, lse = attention.naive(f["Q"], f["K"], f["V"], causal=bool(d["causal"]))
    o16 = bf16_to_float32(to_bf16_bits(o.astype(np.float32))).astype(np.float64)
    x["LSE"] = lse.astype(np.float32)
    x["DELTA"] = (o16 * f["DO"]).sum(-1).astype(np.float32)
    return _with_stats(x, d)


def _with_stats(x: dict[str, np.ndarray], d: Dims) -> dict[str, np.ndarray]:
    """L and D as the kernel reads them: per step, by TMA (what flash_bwd_prep writes)."""
    x["STATS"] = attention_bwd.host_stats(x["LSE"], x["DELTA"], BUILDS[_head(d)])
    return x


def outputs(d: Dims) -> dict[str, tuple[tuple[int, ...], str]]:
    shape = (d["B"], d["H"], d["N"], _head(d))
    acc = attention_bwd.dq_scratch_shape(*shape[:3], BUILDS[_head(d)])
    return {"DK": (shape, "uint16"), "DV": (shape, "uint16"), "DQ": (acc, "float32")}


def reference(x: dict[str, np.ndarray], d: Dims) -> dict[str, np.ndarray]:
    """The kernel's products in float64 from ITS inputs (L and D as given): DQ is the accumulator, dS K."""
    q, k, v, do = (bf16_to_float32(x[n]).astype(np.float64) for n in ("Q", "K", "V", "DO"))
    c = _scale(q.shape[-1])
    p = np.exp(q @ np.swapaxes(k, -1, -2) * c - x["LSE"].astype(np.float64)[..., None])
    if d["causal"]:
        p = np.where(np.tril(np.ones(p.shape[-2:], bool)), p, 0.0)
    ds = p * (do @ np.swapaxes(v, -1, -2) - x["DELTA"].astype(np.float64)[..., None])
    dq, b = ds @ k, BUILDS[_head(d)]
    return {"DK": c * np.swapaxes(ds, -1, -2) @ q, "DV": np.swapaxes(p, -1, -2) @ do,
            "DQ": attention_bwd.park_dq(dq, b) if b.dq_fragments else dq}


def launch(d: Dims) -> Launch:
    b = BUILDS[_head(d)]
    return Launch(grid=(-(-d["N"] // b.kv_block), d["H"], d["B"]), block=(b.threads,), shared_mem=b.shared_bytes)


def args(a: Arrays, d: Dims) -> tuple[Any, ...]:
    head = _head(d)
    b = BUILDS[head]
    a["DQ"][...] = 0  # the accumulator starts at zero (flash_bwd_prep's job in the full backward)
    maps = [tensor_map(a[n], (b.step_box_rows if n in ("Q", "DO") else 64, head), dtype="bfloat16")
            for n in ("Q", "K", "V", "DO", "DK", "DV")]
    if b.dq_fragments:  # rows of 64 floats, one unswizzled box per part (its values in register order)
        maps.append(tensor_map(a["DQ"].reshape(d["B"], d["H"], -1, 64), (b.dq_box_rows, 64), swizzle=0,
                               dtype="float32"))
    else:
        maps.append(tensor_map(a["DQ"], (b.dq_box_rows, 64), dtype="float32"))
    maps.append(tensor_map(a["STATS"], (attention_bwd.STATS_ROWS, attention_bwd.stats_cols(b)), swizzle=0,
                           dtype="float32"))
    return (*maps, d["H"], d["N"], np.float32(_scale(head)), d["causal"])


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


_MAIN = Exercise(
    id="ch11_flash_bwd",
    title="Hopper FlashAttention backward with the keys as rows: S^T, P^T and dS^T, and the three gradient products",
    chapter="11",
    untouched=("wgmma used", "no warpgroup tensor-core instructions"),
    solution="ch11_flash_bwd.cu",
    kernel="flash_bwd",
    language="cuda",
    inputs=inputs,
    outputs=outputs,
    reference=reference,
    launch=launch,
    args=args,
    cases=attn.CASES,
    shapes="any sequence length, causal or not; d = 128 and 64; Q, K, V, dO as [batch, heads, seq, d] bf16",
    # P and dS are rounded to bf16 before the products (as in every FlashAttention backward); DQ is the
    # unscaled accumulator, sqrt(128) ~ 11x the size of dQ, so its absolute errors are too (measured on the
    # emulator: worst |error| ~0.07 on entries near zero)
    rtol=5e-2,
    atol=1.5e-1,
    arch="sm_90a",
    options=BUILD.options,
    notes=("DQ is the fp32 accumulator as the kernel leaves it: at d = 128 each step's two dQ parts in register "
           "order (DQ_FRAGMENTS), so a DQ index there is a place in that block, not a (query, column); "
           "tklab.kernels.attention_bwd.park_dq says where each value goes",),
    # the five products (S and dP again, dV, dK, the dQ share) on the tensor cores, judged on what executed
    floors=(TensorCoreWork(lambda d: attention_bwd.flops(d["B"], d["H"], d["N"], _head(d), bool(d["causal"]))),),
    static=(
        SassHas(r"HGMMA(\..*)?", "warpgroup tensor-core instructions (HGMMA)",
                "issue S^T, dP^T, dV += P^T dO and dK += dS^T Q (P^T and dS^T from registers) and dQ's part",
                min_count=32, name="wgmma used"),
        SassHas(r"MUFU\.EX2", "fast exponentials (MUFU.EX2)", "recompute P^T = exp2(c S^T - l2) with map_col",
                min_count=16, name="exponentials"),
        attn.NO_SERIALIZED_WGMMA,
        NoSpills(),
    ),
    bench=Bench(dims={"B": 2, "H": 16, "N": 8192, "causal": 0}, baseline=sdpa_cudnn_backward,
                baseline_name="SDPA cuDNN backward", output="DV", target=0.75,
                flops=lambda d: attention_bwd.flops(d["B"], d["H"], d["N"], _head(d), bool(d["causal"])),
                expect=expect_dv, rtol=5e-2, atol=5e-2,
                # the reference's whole backward (its first pass and dQ pass included) against cuDNN's, at this
                # shape on the H200 (bench/results/flash_bwd_*.md, the run that made it the default; the main
                # kernel alone, what the check times, is faster than that); the target is TARGET_MARGIN below
                measured=(0.96,)),
)

#: The d = 64 build's cases (GPU and CPU emulator alike): several key blocks (128 keys each with two consumers)
#: and query blocks, a ragged tail, causal or not.
D64_CASES = ({"B": 1, "H": 2, "N": 300, "causal": 1, "D": 64}, {"B": 2, "H": 1, "N": 77, "causal": 0, "D": 64})
D64 = dataclasses.replace(_MAIN, id="ch11_flash_bwd@d64", title="its d = 64 build", options=BUILDS[64].options,
                          cases=D64_CASES, emu_cases=D64_CASES, bench=None, static=(), floors=())
SPEC = dataclasses.replace(_MAIN, builds=(D64,))
