"""The chapter-08 Hopper GEMMs (every step of tklab.kernels.gemm) against a float64 reference, on the GPU."""

from __future__ import annotations

import pytest

from tklab import gemm

pytestmark = [pytest.mark.gpu, pytest.mark.hopper]

TILE_SHAPES = [(128, 256, 64), (256, 512, 192), (384, 1024, 1024), (1024, 256, 2048), (2048, 768, 320)]
AWKWARD_SHAPES = [(1000, 1000, 1000), (4096, 4000, 1032), (1, 8, 8), (129, 264, 72), (3000, 256, 8)]
STREAM_K = ["6_stream_k", "6_stream_k_c1"]  # VARIANTS: the last wave split along K
# shapes whose last wave is split on 132 SMs (tiles % SMs > 0 and enough K-slices), incl. the LLM-like ones
SPLIT_SHAPES = [(4096, 4096, 4096), (2048, 2048, 2048), (4000, 4000, 4000), (8192, 1024, 8192), (1000, 1000, 1000),
                (4096, 4000, 1032), (777, 1032, 4104)]


def _run(step, m, n, k, **kw):
    torch = pytest.importorskip("torch")
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemm.prepare(a, b, c, step=step, **kw)()
    torch.cuda.synchronize()
    return gemm.errors(c, a, b)


@pytest.mark.parametrize("step", list(gemm.STEPS))
@pytest.mark.parametrize("m,n,k", TILE_SHAPES)
def test_every_step_matches_float64(step, m, n, k):
    if step == "1_one_warpgroup" or m % 128 == 0:
        e = _run(step, m, n, k)
        assert e.ok(), f"{step} {m}x{n}x{k}: {e}"


@pytest.mark.parametrize("step", ["3_persistent", "4_l2_order", "5_cluster", *STREAM_K])
@pytest.mark.parametrize("m,n,k", AWKWARD_SHAPES)
def test_persistent_steps_take_any_shape(step, m, n, k):
    e = _run(gemm.VARIANTS.get(step) or step, m, n, k)
    assert e.ok(), f"{step} {m}x{n}x{k}: {e}"


@pytest.mark.parametrize("step", STREAM_K)
@pytest.mark.parametrize("m,n,k", SPLIT_SHAPES)
def test_stream_k_is_right_and_the_same_every_run(step, m, n, k):
    """Split tiles are summed in worker order: two launches give the same bits; the flags reset between them."""
    torch = pytest.importorskip("torch")
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c1, c2 = (torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(2))
    run1 = gemm.prepare(a, b, c1, step=gemm.VARIANTS[step])
    run1()
    run1()  # the same workspace twice: a flag not handed back would let the second run read a stale partial
    gemm.prepare(a, b, c2, step=gemm.VARIANTS[step])()
    torch.cuda.synchronize()
    e = gemm.errors(c1, a, b)
    assert e.ok(), f"{step} {m}x{n}x{k}: {e}"
    assert torch.equal(c1, c2)


@pytest.mark.parametrize("step", ["3_persistent", "5_cluster"])
def test_few_blocks_walking_many_tiles(step):
    """Two clusters walk all 8 x 4 tiles: the ring wraps across tiles, the staging tiles are reused."""
    e = _run(step, 1000, 1000, 1000, max_clusters=2)
    assert e.ok(), str(e)


@pytest.mark.parametrize("step,clusters", [("6_stream_k", 3), ("6_stream_k_c1", 5), ("6_stream_k_c1", 7)])
def test_stream_k_on_a_few_blocks(step, clusters):
    """1000^3 on a pretend small GPU: whole waves, then the leftover tiles split among the blocks."""
    e = _run(gemm.VARIANTS[step], 1000, 1000, 1000, max_clusters=clusters)
    assert e.ok(), str(e)


def test_gemm_runs_on_cupy_arrays_holding_bf16_bits():
    cp = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    a = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    a16, b16 = cp.asarray(a.view(torch.int16)).view(cp.uint16), cp.asarray(b.view(torch.int16)).view(cp.uint16)
    for step in gemm.STEPS:
        c16 = gemm.gemm(a16, b16, step=step)
        cp.cuda.runtime.deviceSynchronize()
        c = torch.as_tensor(c16.view(cp.int16), device="cuda").view(torch.bfloat16)
        assert gemm.errors(c, a, b).ok(), step
