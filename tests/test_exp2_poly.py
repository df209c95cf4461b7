"""fast::exp2_poly (cuda/tk/common/exp2_poly.cuh): 2^x on the FMA pipe, run on the CPU emulator (the PTX NVRTC
makes, interpreted, rounding modes included) against float64, and its SASS, which must hold no MUFU.EX2."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from tklab.toolchain.compiler import compile as nvrtc_compile

emu = pytest.importorskip("tklab.emulate")

SRC = r"""
#include "tk/common/common.cuh"
#include "tk/common/exp2_poly.cuh"
extern "C" __global__ void exp2_poly_probe(const float* x, float* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = tk::fast::exp2_poly(x[i]);
}
"""
#: The bound held (the header states 2^-13; the fit measures 8.6e-5 = 2^-13.5): P is rounded to bf16 next, whose
#: 8 bits err by up to 2^-9 relative, so 2^-12 is an eighth of that rounding, and a cubic that lost a coefficient
#: or took the wrong floor (an error of a few percent) fails it.
BOUND = 2.0 ** -12


@functools.cache
def _module() -> emu.EmuModule:
    return emu.compile(SRC, arch="sm_90a", name="exp2_poly_probe.cu")


def _run(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32)
    y = np.full_like(x, np.nan)
    _module()["exp2_poly_probe"]((len(x) + 255) // 256, 256, (x, y, np.int32(len(x))))
    return y


def test_relative_error_on_the_softmax_range_is_below_the_bound() -> None:
    """A dense sweep of [-126, 0] (every integer and its neighbours included, where the floor changes) and a few
    values just above 0 (c x - c m can round to a hair above 0 on the row's max)."""
    rng = np.random.default_rng(0)
    ints = np.arange(-126, 1, dtype=np.float32)
    x = np.concatenate([np.linspace(-126, 0, 6001, dtype=np.float32), ints, np.nextafter(ints, np.float32(-200)),
                        np.nextafter(ints, np.float32(200)), rng.uniform(-126, 0, 3000).astype(np.float32),
                        rng.uniform(-1, 0, 2000).astype(np.float32), np.float32([1e-7, 3e-6, -1e-30])])
    x = x[x >= -126]  # below, 2^x is a float denormal (the next test)
    y = _run(x)
    exact = np.exp2(x.astype(np.float64))
    rel = np.abs(y.astype(np.float64) / exact - 1)
    worst = int(np.argmax(rel))
    print(f"exp2_poly: max relative error {rel.max():.3e} (2^{np.log2(rel.max()):.2f}) at x = {x[worst]!r} over "
          f"{len(x)} points in [-126, 0]; bound 2^{np.log2(BOUND):.0f}")
    assert rel.max() < BOUND, (x[worst], y[worst], exact[worst])
    assert rel.max() > 2.0 ** -20, "a cubic cannot be this exact: is the probe running MUFU's ex2?"


def test_masked_scores_and_underflow_give_exactly_zero() -> None:
    x = np.float32([-np.inf, -127.0, -127.5, -150.0, -1e30, np.finfo(np.float32).min])
    y = _run(x)
    assert np.all(y == 0.0) and not np.signbit(y).any(), y
    # between -127 and -126 the true value is below 2^-126: a denormal at most, which .ftz arithmetic reads as 0
    tiny = _run(np.float32([-126.5, -126.001, -126.999]))
    assert np.all((tiny >= 0) & (tiny < 2.0 ** -126)), tiny


def test_exact_at_zero_and_at_integers() -> None:
    """f = 0 makes the cubic exactly 1, so 2^k for an integer k is exact (the row's max gives P = 1 exactly)."""
    k = np.arange(-126, 1, dtype=np.float32)
    assert np.array_equal(_run(k), np.exp2(k)), "2^k for integer k"


def test_its_sass_uses_no_special_function_unit() -> None:
    """No MUFU at all (not EX2, and no F2I/FRND conversion, which share MUFU's pipe): only FMA and ALU work."""
    k = nvrtc_compile(SRC, arch="sm_90a", name="exp2_poly_probe.cu")["exp2_poly_probe"]
    h = k.histogram
    assert not [op for op in h if op.startswith(("MUFU", "F2I", "I2F", "FRND", "F2F"))], dict(h)
    assert h["FFMA"] >= 3, dict(h)  # the cubic's three multiply-adds
