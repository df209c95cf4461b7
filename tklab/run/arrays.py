"""The course's array conventions, in one place: which library owns an array, bf16 as bits, "close enough".

- ``array_module(x)``: NumPy or CuPy, whichever owns ``x`` (CuPy's own ``get_array_module``, asked only
  when CuPy is already imported: an array of a library nobody imported cannot exist).
- bf16: NumPy and CuPy have no bfloat16 dtype, so bf16 data live as ``uint16`` bit patterns (kernels
  declare ``__nv_bfloat16*``; the launcher accepts uint16 for it). ``to_bf16_bits`` rounds float32 to the
  nearest even bf16, as the hardware's ``cvt.rn.bf16.f32`` does; ``bf16_to_float32`` is exact.
  Why not ``ml_dtypes`` or torch: neither is a dependency of what the course installs (torch is an
  optional baseline), and the conversion is three lines of integer arithmetic on either library.
- ``isclose(got, expected, rtol, atol, rms=None)``: ``|got - expected| <= atol + rtol·|expected|``
  element-wise, NaN never close (an output element the kernel never wrote stays NaN and must fail),
  through the owning library's ``isclose`` (NumPy, CuPy or torch): every check in the course uses this
  one rule. With ``rms`` (for outputs whose values are small, where an absolute 2e-2 would pass a wrong
  answer): ``atol`` is in units of the expected output's RMS, and the relative RMS error
  ``‖got - expected‖ / ‖expected‖`` must also stay within ``rms``; when it does not, the elements whose
  error exceeds ``rms`` × RMS(expected) are the ones reported as not close (there always is one then).

Public API: ``array_module``, ``to_bf16_bits``, ``bf16_to_float32``, ``as_values``, ``bf16_random``,
``BF16_NAN``, ``POISON_BITS``, ``poisoned``, ``unwritten``, ``isclose``, ``relative_rms``.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

#: bf16 NaN (the canonical quiet NaN): what an unwritten bf16 output element holds.
BF16_NAN = 0x7FC0


def array_module(x: Any) -> Any:
    """``numpy`` or ``cupy``, whichever owns ``x`` (CuPy is never imported here just to ask)."""
    cupy = sys.modules.get("cupy")
    return cupy.get_array_module(x) if cupy is not None else np


def to_bf16_bits(x: Any) -> Any:
    """float32 values → bf16 bit patterns (uint16, same library as ``x``), rounded to nearest even; NaN
    stays NaN."""
    xp = array_module(x)
    f = xp.ascontiguousarray(xp.asarray(x, dtype=xp.float32))
    u = f.view(xp.uint32)
    # Rounding adds 0x7FFF plus the kept half's lowest bit, then drops the low 16 bits. In place and in 32 bits (a
    # graded check draws ~10^8 bf16 inputs per timed run: a 64-bit copy and five temporaries made this 5x slower):
    # the sum wraps only for patterns above 0xFFFF7FFF, which are NaNs, replaced below.
    r = u >> 16
    r &= 1
    r += 0x7FFF
    r += u
    r >>= 16
    bits = r.astype(xp.uint16)
    bits[xp.isnan(f)] = BF16_NAN
    return bits


def bf16_to_float32(bits: Any) -> Any:
    """bf16 bit patterns (uint16, NumPy or CuPy) → the float32 values they stand for (exact)."""
    xp = array_module(bits)
    return (xp.asarray(bits).astype(xp.uint32) << 16).view(xp.float32)


def as_values(x: Any) -> Any:
    """An output as the numbers it stands for: uint16 arrays are bf16 bits, anything else is as it is."""
    return bf16_to_float32(x) if getattr(x, "dtype", None) == np.uint16 else x


#: The bits an output holds until the kernel writes it (``poisoned``): a NaN for floats, but one with a payload no
#: arithmetic makes (a GPU's and a CPU's NaNs are canonical, or carry their operands' payloads), so a NaN the kernel
#: computed and wrote is told apart from an element it never wrote.
POISON_BITS = {np.dtype(np.float32): (np.uint32, 0x7FC0DEAD), np.dtype(np.float64): (np.uint64, 0x7FF80000DEADBEEF),
               np.dtype(np.float16): (np.uint16, 0x7E5D), np.dtype(np.uint16): (np.uint16, 0x7FDA)}


def poisoned(xp: Any, shape: Any, dtype: Any = np.float32) -> Any:
    """An output array that shows every element the kernel never writes: a NaN of ``POISON_BITS`` for floats and
    for uint16 (bf16 data), -1 for other integers."""
    dtype = np.dtype(dtype)
    if dtype in POISON_BITS:
        bits, value = POISON_BITS[dtype]
        return xp.full(shape, value, dtype=bits).view(dtype)
    return xp.full(shape, -1, dtype=dtype)


def unwritten(x: np.ndarray) -> np.ndarray:
    """Where ``x`` (an output the checker filled with ``poisoned``) still holds the poison: never written."""
    x = np.asarray(x)
    if x.dtype in POISON_BITS:
        bits, value = POISON_BITS[x.dtype]
        return x.view(bits) == value
    return np.zeros(x.shape, dtype=bool) if x.dtype.kind == "f" else x == -1


def bf16_random(shape: tuple[int, ...], rng: Any = None) -> Any:
    """Uniform [-1, 1) values as bf16 bits on the GPU (a uint16 CuPy array)."""
    import cupy as cp

    rng = rng or cp.random.default_rng()
    return to_bf16_bits(rng.uniform(-1, 1, shape, dtype=cp.float32))


def _rms(xp: Any, x: Any) -> float:
    finite = x[xp.isfinite(x)]
    return float(xp.sqrt(xp.mean(finite * finite))) if finite.shape[0] else 0.0


def relative_rms(got: Any, expected: Any) -> float:
    """``‖got - expected‖ / ‖expected‖`` over the elements where both are finite (NaN: ``isclose`` fails them)."""
    g, e, xp = _as64(got, expected)
    both = xp.isfinite(g) & xp.isfinite(e)
    d, ref = (g - e)[both], e[both]
    norm = float(xp.sqrt(xp.sum(ref * ref)))
    err = float(xp.sqrt(xp.sum(d * d)))
    return err / norm if norm > 0 else (0.0 if err == 0 else math.inf)


def _as64(got: Any, expected: Any) -> tuple[Any, Any, Any]:
    if hasattr(got, "data_ptr") and hasattr(got, "double"):  # torch: compared through NumPy-like calls
        import torch

        return got.double(), expected.double(), torch
    xp = array_module(got)
    return xp.asarray(got, dtype=xp.float64), xp.asarray(expected, dtype=xp.float64), xp


def isclose(got: Any, expected: Any, rtol: float, atol: float, rms: float | None = None) -> Any:
    """Element-wise ``|got - expected| <= atol + rtol·|expected|``; NaN is never close (see the module doc).
    With ``rms``: ``atol`` counts in RMS(expected), and a relative RMS error above ``rms`` fails the
    elements whose error exceeds ``rms`` × RMS(expected).

    ``got`` and ``expected`` belong to one library (NumPy, CuPy or torch) and are compared in float64.
    """
    g, e, xp = _as64(got, expected)
    scale = _rms(xp, e) if rms is not None else 1.0
    close = xp.isclose(g, e, rtol=rtol, atol=atol * scale)
    if rms is not None and relative_rms(g, e) > rms:
        close = close & ~(xp.abs(g - e) > rms * scale)
    return close
