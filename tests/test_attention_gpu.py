"""Chapters 09 and 10's attention kernels against a float64 reference, on the GPU (torch inputs).

Fresh random inputs each run, outputs poisoned with NaN first; awkward lengths (1, 77, 1000, 4097),
causal and not, d = 64 and 128, large logits (a naive softmax overflows), and the [batch, seq, heads, d]
memory layout seen as [batch, heads, seq, d]. bench/flash_fwd.py check runs the same on every variant.
"""

from __future__ import annotations

import pytest

from tklab import attention

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

SHAPES = [(1, 2, 1), (2, 2, 77), (1, 3, 1000), (1, 1, 4097)]
KERNELS = [pytest.param("tiles", id="ch09-tiles"), pytest.param("hopper", id="ch10-hopper", marks=pytest.mark.hopper)]


def run(kernel: str, q, k, v, causal: bool) -> attention.Errors:
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device="cuda")
    attention.prepare(q, k, v, o, lse, causal=causal, kernel=kernel)()
    torch.cuda.synchronize()
    return attention.errors(o, lse, q, k, v, causal=causal)


def randn(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("b,h,n", SHAPES, ids=[f"n{s[2]}" for s in SHAPES])
def test_matches_float64(kernel, d, causal, b, h, n):
    q, k, v = randn(b, h, n, d), randn(b, h, n, d), randn(b, h, n, d)
    e = run(kernel, q, k, v, causal)
    assert e.ok(), str(e)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_large_logits(kernel, causal):
    q = (randn(1, 2, 1000, 128).float() * 30).to(torch.bfloat16)  # scores in the hundreds
    k, v = randn(1, 2, 1000, 128), randn(1, 2, 1000, 128)
    e = run(kernel, q, k, v, causal)
    assert e.ok(), str(e)


@pytest.mark.parametrize("kernel", KERNELS)
def test_sequence_major_layout(kernel):
    """q, k, v as a projection writes them, [b, n, h, d], seen as [b, h, n, d] without a copy."""
    q, k, v = (randn(2, 300, 3, 64).transpose(1, 2) for _ in range(3))
    e = run(kernel, q, k, v, causal=True)
    assert e.ok(), str(e)


@pytest.mark.parametrize("kernel", KERNELS)
def test_flash_fwd_allocates_outputs_like_q(kernel):
    q, k, v = randn(1, 2, 256, 64), randn(1, 2, 256, 64), randn(1, 2, 256, 64)
    o, lse = attention.flash_fwd(q, k, v, kernel=kernel, scale=0.05)
    ref_o, ref_lse = attention.reference(q, k, v, scale=0.05)
    assert o.shape == q.shape and o.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert float((o.double() - ref_o).norm() / ref_o.norm()) < 1e-2
    assert float((lse.double() - ref_lse).abs().max()) < 1e-2


@pytest.mark.hopper
def test_cupy_arrays_holding_bf16_bits():
    cp = pytest.importorskip("cupy")
    q, k, v = randn(1, 2, 200, 128), randn(1, 2, 200, 128), randn(1, 2, 200, 128)
    as_bits = [cp.asarray(x.view(torch.int16)).view(cp.uint16) for x in (q, k, v)]
    o_bits, lse = attention.flash_fwd(*as_bits)
    cp.cuda.runtime.deviceSynchronize()
    o = torch.as_tensor(o_bits.view(cp.int16), device="cuda").view(torch.bfloat16)
    ref_o, _ = attention.reference(q, k, v)
    assert float((o.double() - ref_o).norm() / ref_o.norm()) < 1e-2
    assert lse.shape == (1, 2, 200)
