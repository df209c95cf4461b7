"""The chapter-08 Hopper GEMMs (every step of tklab.course.gemm) against a float64 reference, on the GPU."""

from __future__ import annotations

import pytest

from tklab import gemm

pytestmark = [pytest.mark.gpu, pytest.mark.hopper]

TILE_SHAPES = [(128, 256, 64), (256, 512, 192), (384, 1024, 1024), (1024, 256, 2048), (2048, 768, 320)]
AWKWARD_SHAPES = [(1000, 1000, 1000), (4096, 4000, 1032), (1, 8, 8), (129, 264, 72), (3000, 256, 8)]


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


@pytest.mark.parametrize("step", ["3_persistent", "4_l2_order", "5_cluster"])
@pytest.mark.parametrize("m,n,k", AWKWARD_SHAPES)
def test_persistent_steps_take_any_shape(step, m, n, k):
    e = _run(step, m, n, k)
    assert e.ok(), f"{step} {m}x{n}x{k}: {e}"


@pytest.mark.parametrize("step", ["3_persistent", "5_cluster"])
def test_few_blocks_walking_many_tiles(step):
    """Two clusters walk all 8 x 4 tiles: the ring wraps across tiles, the staging tiles are reused."""
    e = _run(step, 1000, 1000, 1000, max_clusters=2)
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
