"""tk/ops/warpgroup/fragments.cuh on the CPU emulator: a warpgroup's fp32 accumulator parked in register order and
read back.

The claims held here: store_fragments writes thread t's register pairs 2k, 2k+1 as the k-th float4 of a
thread-interleaved block (float4 index k * 128 + t), so the block is a permutation of the tile that a NumPy model of
the wgmma accumulator layout predicts (the library's fragment layout, held to the H200's own wgmma outputs by
tests/test_layouts.py); load_fragments gives every thread its registers back, so for_each_pair puts every value at
its (row, column) again; and a warp's stores are 16 bytes each, to 512 contiguous bytes (in the SASS: STS.128 into
shared memory, one per 4 registers). Both engines (interpreted PTX, native build)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

emu = pytest.importorskip("tklab.emulate")

SRC = r"""#include "tk.cuh"
#include "tk/ops/warpgroup/fragments.cuh"
using namespace tk;

// 128 threads: warp w's rows 16w.. of a 64 x N tile, each value its own index (row * N + col); parked in global
// memory (park), then read back and each value written to its place (unpark).
template <int N>
__device__ void park_n(float* parked) {
    rt_fl<16, N> t;
    const int row0 = 16 * warpgroup::warp();
    for_each_pair(t, [&](float2& v, rc at, rc e0, rc e1) {
        v.x = float((row0 + at.r + e0.r) * N + at.c + e0.c);
        v.y = float((row0 + at.r + e1.r) * N + at.c + e1.c);
    });
    warpgroup::store_fragments(parked, t);
}
template <int N>
__device__ void unpark_n(const float* parked, float* out) {
    rt_fl<16, N> t;
    warpgroup::load_fragments(t, parked);
    const int row0 = 16 * warpgroup::warp();
    for_each_pair(t, [&](const float2& v, rc at, rc e0, rc e1) {
        out[(row0 + at.r + e0.r) * N + at.c + e0.c] = v.x;
        out[(row0 + at.r + e1.r) * N + at.c + e1.c] = v.y;
    });
}
extern "C" __global__ void park(float* parked, int n) { n == 64 ? park_n<64>(parked) : park_n<80>(parked); }
extern "C" __global__ void unpark(const float* parked, float* out, int n) {
    n == 64 ? unpark_n<64>(parked, out) : unpark_n<80>(parked, out);
}
// Through shared memory, as chapter 11's dQ part goes (the SASS test reads this one).
extern "C" __global__ void park_shared(float* out) {
    __shared__ alignas(16) float buf[64 * 64];
    rt_fl<16, 64> t;
    for_each_pair(t, [&](float2& v, rc at, rc e0, rc) { v = make_float2(at.r + e0.r, at.c + e0.c); });
    warpgroup::store_fragments(buf, t);
    __syncthreads();
    for (int i = threadIdx.x; i < 64 * 64; i += 128) out[i] = buf[i];
}
"""


@pytest.fixture(params=["ptx", "native"])
def engine(request: pytest.FixtureRequest) -> str:
    if request.param == "ptx":
        from tklab.toolchain import locate

        if not locate.nvrtc_available():
            pytest.skip("the interpreted engine needs NVRTC")
    return request.param


@functools.cache
def _module(engine: str) -> object:
    return emu.compile(SRC, name="fragments.cu", engine=engine)


def _register_order(n: int) -> np.ndarray:
    """The parked block predicted from the accumulator layout: thread t = 32 w + l holds, per 16-column subtile j,
    pairs (row g, cols 16j + 2q, +1), (row g + 8, same), (row g, cols 16j + 8 + 2q, +1), (row g + 8, same), with
    g = 16 w + l / 4 and q = l % 4; its pairs 2k, 2k + 1 are float4 k * 128 + t of the block."""
    block = np.zeros((n // 8, 128, 4))
    for t in range(128):
        w, lane = divmod(t, 32)
        g, q = 16 * w + lane // 4, lane % 4
        pairs = []
        for j in range(n // 16):
            for dr, dc in ((0, 0), (8, 0), (0, 8), (8, 8)):
                r, c = g + dr, 16 * j + dc + 2 * q
                pairs.append((r * n + c, r * n + c + 1))
        for k in range(n // 8):
            block[k, t] = [*pairs[2 * k], *pairs[2 * k + 1]]
    return block.reshape(-1)


@pytest.mark.parametrize("n", [64, 80])
def test_parked_block_is_the_registers_in_thread_order_and_reads_back_in_place(engine: str, n: int) -> None:
    mod = _module(engine)
    parked = np.full(64 * n, np.nan, np.float32)
    mod["park"]((1,), (128,), (parked, n))
    np.testing.assert_array_equal(parked, _register_order(n))
    out = np.full(64 * n, np.nan, np.float32)
    mod["unpark"]((1,), (128,), (parked, out, n))
    np.testing.assert_array_equal(out, np.arange(64 * n, dtype=np.float32))


def test_a_permuted_block_does_not_read_back_in_place(engine: str) -> None:
    """The check above can fail: a block whose float4s are swapped between two threads reads back wrong."""
    mod = _module(engine)
    parked = np.zeros(64 * 64, np.float32)
    mod["park"]((1,), (128,), (parked, 64))
    blocks = parked.reshape(-1, 4).copy()
    blocks[[0, 1]] = blocks[[1, 0]]
    out = np.zeros(64 * 64, np.float32)
    mod["unpark"]((1,), (128,), (blocks.reshape(-1), out, 64))
    assert not np.array_equal(out, np.arange(64 * 64, dtype=np.float32))


def test_parking_in_shared_memory_is_one_16_byte_store_per_4_registers() -> None:
    import tklab

    sass = tklab.compile(SRC, arch="sm_90a", name="fragments.cu")["park_shared"].sass
    stores = [line.split()[1] for line in sass.splitlines() if " STS" in line]
    assert stores == ["STS.128"] * 8, stores


@pytest.mark.parametrize("n", [64, 80])
def test_the_layout_model_of_a_parked_block_is_the_emulated_one(n: int) -> None:
    """tklab.models.layouts.parked (what chapter 11's exercise check parks its reference with) is this file's
    register-order model, which the emulated store_fragments matches (above)."""
    from tklab.models.layouts import parked

    np.testing.assert_array_equal([r * n + c for r, c in parked(n)], _register_order(n))
