"""Chapter 07's copies on the GPU: the three ways and the ring copy every element, ragged edges included."""

from __future__ import annotations

import pytest

from tklab import tma_copy

pytestmark = [pytest.mark.gpu, pytest.mark.hopper]


@pytest.mark.parametrize("way", list(tma_copy.WAYS))
@pytest.mark.parametrize("shape", [(64, 64), (256, 192), (1024, 2048)])
def test_three_ways_copy_exactly(way, shape):
    cp = pytest.importorskip("cupy")
    src = cp.random.default_rng().standard_normal(shape, dtype=cp.float32)
    dst = cp.full_like(src, cp.nan)
    tma_copy.prepare_way(way, src, dst)()
    cp.cuda.runtime.deviceSynchronize()
    assert bool(cp.array_equal(src, dst))


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("shape", [(100, 68), (1, 4), (3000, 1000), (64, 64)])
def test_ring_copies_every_element_and_no_more(stages, shape):
    cp = pytest.importorskip("cupy")
    src = cp.random.default_rng().standard_normal(shape, dtype=cp.float32)
    big = cp.full((shape[0] + 1, shape[1]), cp.nan, dtype=cp.float32)  # one guard row after the output
    dst = big[: shape[0]]
    tma_copy.prepare_ring(src, dst, stages)()
    cp.cuda.runtime.deviceSynchronize()
    assert bool(cp.array_equal(src, dst))
    assert bool(cp.isnan(big[shape[0]]).all())  # nothing written past the end


def test_ways_refuse_ragged_matrices():
    cp = pytest.importorskip("cupy")
    x = cp.zeros((100, 64), cp.float32)
    with pytest.raises(ValueError, match="multiples of 64"):
        tma_copy.prepare_way("tma", x, x.copy())
