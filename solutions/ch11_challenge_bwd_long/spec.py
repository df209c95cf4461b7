"""ch11 challenge: one backward step of attention (dQ, dK, dV) for one head over a long causal sequence at d = 128, as
fast as the learner can make it; checked for correctness, timed against PyTorch's SDPA backward (cuDNN) in the same
run (the class leaderboard's ratio: tklab.grading.leaderboard)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tklab.grading import leaderboard
from tklab.grading.spec_kit import Arrays, Bench, Dims, Exercise, Launch, WritesGlobal
from tklab.kernels import attention, attention_bwd
from tklab.run.arrays import bf16_to_float32, to_bf16_bits

ID = "ch11_challenge_bwd_long"
D = 128
KEYS = 64  # keys per block (the launch's grid)
SHARED = 100 * 1024
#: the benchmark: one head, 32k causal tokens (the chapter tuned B = 2, H = 16, N = 8192)
BENCH_DIMS = {"B": 1, "H": 1, "N": 32768, "causal": 1}


def inputs(rng: np.random.Generator, d: Dims) -> dict[str, np.ndarray]:
    """Q, K, V, dO (bf16 bits), and the forward's L (natural log-sum-exp) and D = rowsum(dO o O), O rounded to bf16
    as a forward stores it: exact (float64) at the checked sizes, blockwise at the benchmark's."""
    shape = (d["B"], d["H"], d["N"], D)
    x = {n: to_bf16_bits(rng.standard_normal(shape).astype(np.float32)) for n in ("Q", "K", "V", "DO")}
    f = {n: bf16_to_float32(x[n]) for n in x}
    if d["B"] * d["H"] * d["N"] ** 2 > (1 << 26):
        x["LSE"], x["DELTA"] = attention_bwd_stats(f, bool(d["causal"]))
        return x
    o, lse = attention.naive(*(f[n].astype(np.float64) for n in ("Q", "K", "V")), causal=bool(d["causal"]))
    o16 = bf16_to_float32(to_bf16_bits(o.astype(np.float32))).astype(np.float64)
    x["LSE"] = lse.astype(np.float32)
    x["DELTA"] = (o16 * f["DO"].astype(np.float64)).sum(-1).astype(np.float32)
    return x


def attention_bwd_stats(f: dict[str, np.ndarray], causal: bool, rows: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """L and D in float32, ``rows`` queries at a time per (batch, head), never the N x N matrix; on the GPU with
    CuPy where one is here (the benchmark's inputs), else with NumPy."""
    try:
        import cupy as xp

        if xp.cuda.runtime.getDeviceCount() < 1:
            raise ImportError
    except Exception:  # noqa: BLE001 - no CuPy or no GPU: the same pass on the CPU
        xp = np  # type: ignore[assignment]

    def host(a: Any) -> np.ndarray:
        return a if xp is np else xp.asnumpy(a)

    b, h, n, _ = f["Q"].shape
    lse, delta = np.empty((b, h, n), np.float32), np.empty((b, h, n), np.float32)
    for bi in range(b):
        for hi in range(h):
            q, k, v, do = (xp.asarray(f[x][bi, hi]) for x in ("Q", "K", "V", "DO"))
            for r0 in range(0, n, rows):
                s = (q[r0:r0 + rows] @ k.T) / np.float32(math.sqrt(D))
                if causal:
                    s = xp.where(xp.arange(n)[None, :] <= xp.arange(r0, min(r0 + rows, n))[:, None], s, -xp.inf)
                m = s.max(axis=1, keepdims=True)
                e = xp.exp(s - m)
                total = e.sum(axis=1, keepdims=True)
                o16 = xp.asarray(bf16_to_float32(to_bf16_bits(host((e @ v) / total))))
                lse[bi, hi, r0:r0 + rows] = host((m + xp.log(total))[:, 0])
                delta[bi, hi, r0:r0 + rows] = host((o16 * do[r0:r0 + rows]).sum(axis=1))
    return lse, delta


def outputs(d: Dims) -> dict[str, tuple[tuple[int, ...], str]]:
    shape = (d["B"], d["H"], d["N"], D)
    return {"DQ": (shape, "float32"), "DK": (shape, "uint16"), "DV": (shape, "uint16")}


def reference(x: dict[str, np.ndarray], d: Dims) -> dict[str, np.ndarray]:
    """The three gradients in float64 from the kernel's inputs (L and D as given)."""
    q, k, v, do = (bf16_to_float32(x[n]).astype(np.float64) for n in ("Q", "K", "V", "DO"))
    c = 1 / math.sqrt(D)
    p = np.exp(q @ np.swapaxes(k, -1, -2) * c - x["LSE"].astype(np.float64)[..., None])
    if d["causal"]:
        p = np.where(np.tril(np.ones(p.shape[-2:], bool)), p, 0.0)
    ds = p * (do @ np.swapaxes(v, -1, -2) - x["DELTA"].astype(np.float64)[..., None])
    return {"DQ": c * ds @ k, "DK": c * np.swapaxes(ds, -1, -2) @ q, "DV": np.swapaxes(p, -1, -2) @ do}


def launch(d: Dims) -> Launch:
    return Launch(grid=(-(-d["N"] // KEYS), d["H"], d["B"]), block=(128,), shared_mem=SHARED)


def args(a: Arrays, d: Dims) -> tuple[Any, ...]:
    a["DQ"][...] = 0  # dQ is added into: it starts at zero
    return (a["Q"], a["K"], a["V"], a["DO"], a["LSE"], a["DELTA"], a["DQ"], a["DK"], a["DV"], np.int32(d["H"]),
            np.int32(d["N"]), np.float32(1 / math.sqrt(D)), np.int32(d["causal"]))


def sdpa_backward(arrays: Arrays, d: Dims) -> Any:
    """The library: SDPA cuDNN's backward on the same inputs, from a retained forward (``run()``: dQ, dK, dV)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, do = (torch.from_dlpack(arrays[n]).view(torch.bfloat16) for n in ("Q", "K", "V", "DO"))
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        y = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=bool(d["causal"]))
    return lambda: torch.autograd.grad(y, leaves, do, retain_graph=True)


def expect_dv(arrays: Arrays, d: Dims) -> Any:
    import cupy as cp

    return cp.asarray(sdpa_backward(arrays, d)()[2].float())


SPEC = Exercise(
    id=ID,
    title="Challenge: attention's backward step for one head over 32k causal tokens, as fast as you can make it",
    chapter="11",
    untouched=("writes its output", "never stores to global memory"),
    solution=f"{ID}.cu",
    kernel="attn_bwd",
    language="cuda",
    inputs=inputs,
    outputs=outputs,
    reference=reference,
    launch=launch,
    args=args,
    # several key and query blocks causal with a ragged tail; not causal; one token; a longer causal sequence. Not
    # the benchmark's 32k tokens: their float64 reference on the CPU holds 32768 x 32768 matrices (tens of GB); the
    # timed run compares that shape's dV with cuDNN's on the GPU (Bench.expect).
    cases=({"B": 1, "H": 2, "N": 1000, "causal": 1}, {"B": 2, "H": 1, "N": 77, "causal": 0},
           {"B": 1, "H": 1, "N": 1, "causal": 1}, {"B": 1, "H": 1, "N": 4097, "causal": 1}),
    # Emulated: 3 key and query blocks causal with a tail of 8 (the diagonal blocks, keys and queries past the end);
    # the same not causal; two heads of a short ragged sequence.
    emu_cases=({"B": 1, "H": 1, "N": 136, "causal": 1}, {"B": 1, "H": 1, "N": 136, "causal": 0},
               {"B": 1, "H": 2, "N": 40, "causal": 1}),
    shapes="any sequence length, causal or not; d = 128; Q, K, V, dO, dK, dV as [batch, heads, seq, d] bf16",
    # P and dS are rounded to bf16 before the products (as in every FlashAttention backward)
    rtol=5e-2,
    atol=5e-2,
    static=(WritesGlobal(), leaderboard.RecordedNumbers(ID)),
    bench=Bench(dims=BENCH_DIMS, baseline=sdpa_backward, baseline_name="SDPA cuDNN backward", output="DV",
                flops=lambda d: attention_bwd.flops(d["B"], d["H"], d["N"], D, bool(d["causal"])), expect=expect_dv,
                rtol=5e-2, atol=5e-2),
    arch="sm_90a",
)
