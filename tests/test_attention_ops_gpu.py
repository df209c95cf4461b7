"""The tile-library operations the attention kernels added, each against a NumPy model, on the GPU
(tests/kernels/attention_ops.cu): warp mma with shared operands, masks, map_row, warp_any, bounded
copies, vector stores with a length, the fast special functions, elect_one, named-barrier turns, and
rank-4 TMA copies that stay inside one head."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tklab
from tklab.run.arrays import bf16_to_float32, to_bf16_bits

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent
SEED = int(np.random.SeedSequence().entropy % 2**31)


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def ops(gpu_arch):
    if not gpu_arch.startswith("sm_90"):
        pytest.skip("the probes include Hopper ops (elect, TMA): sm_90 only")
    return tklab.compile((ROOT / "tests" / "kernels" / "attention_ops.cu").read_text(), arch=gpu_arch,
                         name="attention_ops.cu")


@pytest.fixture
def rng():
    return np.random.default_rng(SEED)


def bf16(rng, shape):
    return to_bf16_bits(rng.uniform(-1, 1, shape).astype(np.float32))


def test_warp_mma_with_shared_operands(cp, ops, rng):
    a, b, e = bf16(rng, (32, 32)), bf16(rng, (64, 32)), bf16(rng, (32, 64))
    c, d = cp.full((32, 64), np.nan, np.float32), cp.full((32, 64), np.nan, np.float32)
    ops["mma_shared_operands"](1, 32, (cp.asarray(a), cp.asarray(b), cp.asarray(e), c, d), sync=True)
    af, bf, ef = (bf16_to_float32(x).astype(np.float64) for x in (a, b, e))
    np.testing.assert_allclose(c.get(), af @ bf.T, rtol=1e-5, atol=1e-5, err_msg=f"seed {SEED}")
    np.testing.assert_allclose(d.get(), af @ ef, rtol=1e-5, atol=1e-5, err_msg=f"seed {SEED}")


@pytest.mark.parametrize("row0,col0,length", [(0, 0, 40), (64, 32, 64), (100, 96, 1000), (5, 37, 37)])
def test_masks_map_row_and_warp_any(cp, ops, rng, row0, col0, length):
    x = rng.standard_normal((32, 64)).astype(np.float32)
    v = rng.uniform(0.5, 2, 32).astype(np.float32)
    outs = [cp.full((32, 64), np.nan, np.float32) for _ in range(3)]
    any_out = cp.full(2, -1, np.int32)
    ops["masks"](1, 32, (cp.asarray(x), *outs, cp.asarray(v), row0, col0, length, any_out), sync=True)
    rows, cols = np.arange(32)[:, None] + row0, np.arange(64)[None, :] + col0
    np.testing.assert_array_equal(outs[0].get(), np.where(cols > rows, -np.inf, x))
    np.testing.assert_array_equal(outs[1].get(), np.where(np.broadcast_to(cols, x.shape) >= length, -np.inf, x))
    np.testing.assert_allclose(outs[2].get(), x * v[:, None] - 1, rtol=1e-6, atol=1e-6)
    assert any_out.get().tolist() == [0, 1]


@pytest.mark.parametrize("rows,tile", [(200, 3), (200, 1), (64, 0), (1, 0)])
def test_bounded_copies_zero_fill_and_skip_rows_past_the_end(cp, ops, rng, rows, tile):
    src = bf16(rng, (max(rows, 1), 64))
    dst = cp.full((rows, 64), 0x7FC0, np.uint16)  # bf16 NaN: rows the kernel must not touch stay NaN
    ops["bounded_copy"](1, 128, (cp.asarray(src), dst, rows, tile), sync=True)
    got = dst.get()
    lo, hi = tile * 64, min(tile * 64 + 64, rows)
    np.testing.assert_array_equal(got[lo:hi], src[lo:hi])
    assert (got[:lo] == 0x7FC0).all() and (got[hi:] == 0x7FC0).all()


@pytest.mark.parametrize("length", [0, 7, 16, 31, 32, 100])
def test_vector_store_stops_at_the_length(cp, ops, rng, length):
    v = rng.standard_normal(32).astype(np.float32)
    out = cp.full(32, np.nan, np.float32)
    ops["vector_store_length"](1, 32, (cp.asarray(v), out, length), sync=True)
    got = out.get()
    np.testing.assert_array_equal(got[:min(length, 32)], v[:min(length, 32)])
    assert np.isnan(got[length:]).all()


def test_fast_special_functions_are_within_two_ulp(cp, ops, rng):
    """The accuracy stated in tk/common/fast_math.cuh, measured: relative error below 2^-21 (2 float32 ulp)
    for 2^x on the range softmax uses, log2 and 1/x (bench/fast_math_accuracy.py measures the maxima)."""
    n = 1 << 20
    x = np.concatenate([rng.uniform(-126, 16, n // 2), np.exp2(rng.uniform(-20, 20, n // 2))]).astype(np.float32)
    e, lg, r = (cp.empty(n, np.float32) for _ in range(3))
    ops["fast_math_probe"]((n + 255) // 256, 256, (cp.asarray(x), e, lg, r, n), sync=True)
    xd = x.astype(np.float64)

    def rel(got, ref):
        return np.abs(got.get().astype(np.float64) - ref) / np.abs(ref)

    softmax_range = slice(0, n // 2)  # exp2 only where softmax calls it (and where it does not overflow)
    assert rel(e, np.exp2(xd))[softmax_range].max() < 2**-21
    ref_log = np.log2(np.abs(xd) + np.float64(np.float32(1e-3)))
    far = np.abs(ref_log) > 0.5
    assert rel(lg, ref_log)[far].max() < 2**-21
    assert np.abs(lg.get().astype(np.float64) - ref_log)[~far].max() < 2**-21
    assert rel(r, 1 / xd).max() < 2**-21


def test_elect_one_picks_one_lane_per_warp(cp, ops):
    counts = cp.zeros(12, np.int32)
    ops["elect_probe"](1, 384, (counts,), sync=True)
    assert counts.get().tolist() == [1] * 12


@pytest.mark.parametrize("groups", [2, 3])
def test_turns_go_round_one_group_at_a_time(cp, ops, groups):
    rounds = 50
    log = cp.full(groups * rounds, -1, np.int32)
    ops[f"turns{groups}"](1, 128 * groups, (log, rounds), sync=True)
    assert log.get().tolist() == [k % groups for k in range(groups * rounds)]


@pytest.mark.parametrize("r", [0, 1])
def test_rank4_tma_stays_inside_one_head(cp, ops, rng, r):
    """A 64-row tile starting at row 64 of a 100-row head: rows 100..127 are past the head. The load must
    bring zeros for them (not head h+1's rows) and the store must not write them."""
    from tklab import tma

    b_, h_, n, d = 2, 3, 100, 64
    src = bf16(rng, (b_, h_, n, d))
    sentinel = 0x7FC0
    dst = cp.full((b_, h_, n, d), sentinel, np.uint16)
    seen = cp.full((64, 64), sentinel, np.uint16)
    src_d = cp.asarray(src)
    m_in = tma.tensor_map(src_d, (64, 64), dtype="bfloat16")
    m_out = tma.tensor_map(dst, (64, 64), dtype="bfloat16")
    assert m_in.plan.rank == 4
    ops["tma_rank4"](1, 128, (m_in, m_out, seen, 1, 2, r), sync=True)
    rows = slice(64 * r, min(64 * r + 64, n))
    valid = rows.stop - rows.start
    np.testing.assert_array_equal(seen.get()[:valid], src[1, 2, rows])
    assert (seen.get()[valid:] == 0).all(), "rows past the head must arrive as zeros"
    out = dst.get()
    np.testing.assert_array_equal(out[1, 2, rows], src[1, 2, rows])
    untouched = np.ones(out.shape[:3], bool)
    untouched[1, 2, rows] = False
    assert (out[untouched] == sentinel).all(), "nothing outside the tile's rows of head (1, 2) is written"
