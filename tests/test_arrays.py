"""tklab.run.arrays: the one bf16 conversion, the one tolerance rule, poisoned outputs (NumPy; CuPy on a GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from tklab import arrays


def test_bf16_rounds_to_nearest_even() -> None:
    # bf16 keeps the top 16 bits of a float32; these sit exactly halfway, or just past halfway, between two.
    one = np.float32(1.0).view(np.uint32)
    halfway_even = np.array([one + 0x8000], np.uint32).view(np.float32)  # 1 + 2^-8: ties to even (down)
    halfway_odd = np.array([one + 0x18000], np.uint32).view(np.float32)  # tie above an odd bf16: up
    past_half = np.array([one + 0x8001], np.uint32).view(np.float32)
    bits = arrays.to_bf16_bits(np.concatenate([halfway_even, halfway_odd, past_half]))
    assert bits.dtype == np.uint16
    assert bits.tolist() == [0x3F80, 0x3F82, 0x3F81]


def test_bf16_round_trip_is_exact_and_nan_stays_nan() -> None:
    bits = np.arange(0, 0x7F80, 7, dtype=np.uint16)  # finite positive bf16 values
    assert (arrays.to_bf16_bits(arrays.bf16_to_float32(bits)) == bits).all()
    nan = np.array([0x7F800001], np.uint32).view(np.float32)  # a NaN whose payload would round to inf
    assert arrays.to_bf16_bits(nan)[0] == arrays.BF16_NAN
    assert np.isnan(arrays.bf16_to_float32(np.array([arrays.BF16_NAN], np.uint16)))[0]
    assert arrays.as_values(np.array([0x3F80], np.uint16))[0] == 1.0
    assert arrays.as_values(np.array([2.5]))[0] == 2.5  # not bf16: as it is


def test_bf16_conversion_matches_its_definition_on_every_kind_of_pattern() -> None:
    """The in-place 32-bit rounding against the rule written out in 64 bits (no wrap possible), on the float32
    patterns where a 32-bit sum could go wrong (the largest finite values, infinities, NaNs up to 0xFFFFFFFF, where
    it does wrap) and 2^20 random ones. (All 2^32 patterns matched when the 32-bit form was written, in 155 s.)"""
    rng = np.random.default_rng(0)
    edges = [np.arange(a, b, dtype=np.uint64) for a, b in ((0x7F7F0000, 0x7F810000), (0xFF7F0000, 0xFF810000),
                                                            (0xFFFF0000, 0x100000000), (0, 0x10000))]
    u = np.concatenate(edges + [rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64)]).astype(np.uint32)
    f, before = u.view(np.float32), u.copy()
    wide = u.astype(np.uint64)
    want = np.where(np.isnan(f), arrays.BF16_NAN, ((wide + 0x7FFF + ((wide >> 16) & 1)) >> 16)).astype(np.uint16)
    got = arrays.to_bf16_bits(f)
    assert got.dtype == np.uint16 and np.array_equal(got, want)
    assert np.array_equal(u, before)  # the input is left as it was (the rounding works on a copy)


def test_isclose_is_the_one_rule() -> None:
    expected = np.array([1.0, 100.0, 0.0, 5.0])
    got = np.array([1.0 + 1e-3, 100.5, 2e-3, np.nan])
    close = arrays.isclose(got, expected, rtol=1e-2, atol=1e-3)
    assert close.tolist() == [True, True, False, False]  # |0.002 - 0| > atol; NaN never close
    assert not arrays.isclose(np.array([np.nan]), np.array([np.nan]), 1.0, 1.0)[0]


def test_poisoned_outputs_show_unwritten_elements() -> None:
    assert np.isnan(arrays.poisoned(np, 3, np.float32)).all()
    assert arrays.unwritten(arrays.poisoned(np, (2, 2), np.uint16)).all()  # a bf16 NaN with the poison's payload
    assert np.isnan(arrays.bf16_to_float32(arrays.poisoned(np, (2, 2), np.uint16))).all()
    assert (arrays.poisoned(np, 2, np.int32) == -1).all()


def test_array_module_is_numpy_for_numpy() -> None:
    assert arrays.array_module(np.zeros(2)) is np


@pytest.mark.gpu
def test_cupy_arrays_use_cupy() -> None:
    cp = pytest.importorskip("cupy")
    x = cp.asarray(np.array([1.0, 2.0, 3.0], np.float32))
    assert arrays.array_module(x) is cp
    bits = arrays.to_bf16_bits(x)
    assert isinstance(bits, cp.ndarray) and bits.dtype == cp.uint16
    assert arrays.bf16_to_float32(bits).get().tolist() == [1.0, 2.0, 3.0]
    assert bool(arrays.isclose(x, x, 0.0, 0.0).all())
