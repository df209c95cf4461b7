"""The course's attention as a differentiable PyTorch op: forward = chapter 10's kernel, backward = chapter 11's.

Why a module: a training loop calls ``attention(q, k, v, causal=True)`` like PyTorch's
``scaled_dot_product_attention`` and gets gradients from the learner's own kernels. torch is imported
only when the op is first used (the course installs without it; it is on the GPU machines).

    attention(q, k, v, *, causal=False, scale=None, deterministic=False) -> o
                                                            q, k, v: bf16 CUDA tensors [batch, heads, seq, d],
                                                            d = 64 or 128, last dimension contiguous;
                                                            deterministic: dQ the same bit for bit on every run
    function() -> the torch.autograd.Function class itself  (for torch.autograd.gradcheck-style use)
"""

from __future__ import annotations

import functools
from typing import Any

from . import attention as fwd
from . import attention_bwd as bwd


def _usable(x: Any) -> Any:
    """x itself when the kernels can read it (bf16, last dimension contiguous, 16-byte row strides), else a
    contiguous bf16 copy: gradients arriving from autograd may be any layout (expanded, transposed)."""
    import torch

    x = x.detach()  # the kernels read raw memory (CUDA array interface), which torch refuses for graph tensors
    if x.dtype != torch.bfloat16:
        x = x.to(torch.bfloat16)
    if x.stride(-1) != 1 or any(s % 8 for s in x.stride()[:-1]) or x.data_ptr() % 16:
        x = x.contiguous()
    return x


@functools.cache
def function() -> Any:
    """The torch.autograd.Function (made on first use, so that importing this module needs no torch)."""
    import torch

    class FlashAttention(torch.autograd.Function):
        """O = softmax(scale Q K^T) V with chapter 10's forward; its backward is chapter 11's kernel."""

        @staticmethod
        def forward(ctx: Any, q: Any, k: Any, v: Any, causal: bool, scale: float | None,  # type: ignore[override]
                    deterministic: bool) -> Any:
            q, k, v = (_usable(x) for x in (q, k, v))
            o, lse = fwd.flash_fwd(q, k, v, causal=causal, scale=scale, kernel="hopper")
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal, ctx.scale = causal, scale
            # the backward's options: dQ's key blocks adding in a fixed order (the chapter's kernel: DETERMINISTIC=1)
            ctx.options = bwd.deterministic_options(q.shape[-1]) if deterministic else {}
            return o

        @staticmethod
        def backward(ctx: Any, do: Any) -> Any:  # type: ignore[override]
            # o comes back as the op's output, part of the graph: detach for the kernel's raw-memory view
            q, k, v, o, lse = (t.detach() for t in ctx.saved_tensors)
            dq, dk, dv = bwd.flash_bwd(q, k, v, o, lse, _usable(do), causal=ctx.causal, scale=ctx.scale, **ctx.options)
            return dq, dk, dv, None, None, None

    return FlashAttention


def attention(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None,
              deterministic: bool = False) -> Any:
    """softmax(scale Q K^T) V, differentiable (scale defaults to 1/sqrt(d)); bf16 CUDA tensors
    [batch, heads, seq, d] with d = 64 or 128 (an H100/H200: the kernels use TMA and wgmma).
    ``deterministic=True``: the gradients are the same bit for bit on every run (dK and dV always are; dQ's key
    blocks then add in a fixed order, attention_bwd.deterministic_options), at some cost in speed."""
    return function().apply(q, k, v, causal, scale, deterministic)
