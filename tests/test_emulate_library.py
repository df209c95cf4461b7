"""The tile library's own GPU test suite (tests/test_tile_ops_gpu.py), run on the CPU emulator.

Those tests check every op (fragment layouts, global/shared paths with every swizzle, the allocator,
maps, broadcasts, reductions, mma, layout swaps, the GEMM) against numpy models written from the
documented contracts. Here the very same test functions run with their fixtures pointed at the
emulator: ``ops`` is compiled by ``tklab.emulate``, and ``cupy`` is NumPy (arrays that also answer
``.get()``), so a GPU-only test suite becomes CPU coverage of the emulator.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

emu = pytest.importorskip("tklab.emulate")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_tile_ops_gpu as lib  # noqa: E402

from tklab.run.arrays import poisoned  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


class _HostArray(np.ndarray):
    """A NumPy array that answers CuPy's ``.get()``."""

    def get(self) -> np.ndarray:
        return np.asarray(self)


def _wrap(x: np.ndarray) -> _HostArray:
    return np.ascontiguousarray(x).view(_HostArray)


def _fake_cupy() -> types.ModuleType:
    fake = types.ModuleType("cupy")
    fake.asarray = lambda x, dtype=None: _wrap(np.array(np.asarray(x), dtype=dtype))
    for name in ("full", "zeros", "empty", "ones", "arange"):
        setattr(fake, name, (lambda f: lambda *a, **k: _wrap(f(*a, **k)))(getattr(np, name)))
    fake.asnumpy = np.asarray
    fake.get_array_module = lambda *arrays: np  # the arrays here are NumPy's (tklab.run.arrays asks)
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(deviceSynchronize=lambda: None))
    fake.__getattr__ = lambda name: getattr(np, name)  # dtypes, matmul, linalg, isnan ...
    return fake


@pytest.fixture(autouse=True)
def cupy_is_numpy(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    fake = _fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)  # lib.run() imports cupy to synchronise
    return fake


@pytest.fixture
def cp(cupy_is_numpy: types.ModuleType) -> types.ModuleType:
    return cupy_is_numpy


@pytest.fixture(scope="module")
def arch() -> str:
    return "sm_90a"


@pytest.fixture(scope="module")
def ops() -> emu.EmuModule:
    return emu.compile(lib.OPS_SRC.read_text(), arch="sm_90a", name="tile_ops.cu")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(lib.SEED)


# The library tests, collected here with the fixtures above (the big GEMM sizes are left to the GPU).
test_fragment_layout_matches_contract = lib.test_fragment_layout_matches_contract
test_vector_layouts = lib.test_vector_layouts
test_global_register_roundtrip = lib.test_global_register_roundtrip
test_shared_paths = lib.test_shared_paths
test_swizzle_addresses = lib.test_swizzle_addresses
test_default_swizzle = lib.test_default_swizzle
test_shared_allocator_alignment = lib.test_shared_allocator_alignment
test_maps = lib.test_maps
test_vector_maps = lib.test_vector_maps
test_convert = lib.test_convert
test_broadcasts = lib.test_broadcasts
test_reductions = lib.test_reductions
test_mma = lib.test_mma
test_layout_swap_and_transpose = lib.test_layout_swap_and_transpose
test_shared_vector_roundtrip = lib.test_shared_vector_roundtrip


def test_static_shared_tiles_are_aligned(cp: types.ModuleType, ops: emu.EmuModule) -> None:
    """The probe kernel has threads store 0 into pad[] while others read it, with no barrier: a race (a
    harmless one, every store writes 0), and the emulator says so. The alignment is checked without it."""
    out = poisoned(cp, 2, np.int32)
    with pytest.raises(emu.SharedRace, match=r"on pad\[1\].*thread \(0\) read it.*thread \(1\) wrote it"):
        ops["static_align_probe"](1, 32, (out,))
    ops["static_align_probe"](1, 32, (out,), race=False)
    assert out.get().tolist() == [0, 0]


def test_gemm_matches_numpy(cp: types.ModuleType, rng: np.random.Generator) -> None:
    import tklab

    real = tklab.compile
    try:  # the library test compiles with tklab.compile(src, arch=...): send it to the emulator
        tklab.compile = lambda src, **kw: emu.compile(src, name="gemm_mma_tiles.cu", arch=kw.get("arch", "sm_90a"))
        lib.test_gemm_matches_cupy(cp, rng, "sm_90a", 256, 384, 96)
    finally:
        tklab.compile = real
