"""A wgmma's register A operand under CPU emulation: its registers are the group's until the wgmma.wait_group
that retires it.

PTX ISA (wgmma.wait_group): accessing the accumulator registers *or the input registers holding the fragments of
matrix A* of a wgmma.mma_async before a wait_group that retires its group is undefined behaviour -- the tensor
cores may read A's registers at any moment until then. A small kernel issues D = A B with A in registers (the
tile library's warpgroup::mma_AB with an rt_bf A) and touches A's registers before or after the wait; every case
runs through both engines: the interpreted PTX (the graded path) and the native build (inline PTX translated to
C++ calls). Several wgmma may read the same A registers: that is no hazard.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from tklab.run.arrays import bf16_to_float32, to_bf16_bits

emu = pytest.importorskip("tklab.emulate")

SRC = r"""#include "tk.cuh"
using namespace tk;

// One warpgroup, `iters` steps (a run-time count, so every step reuses the same registers): each step loads
// A (64 x 64 bf16) into registers, each warp its 16 rows, and issues D = A B (B in shared memory) as one group.
// At the end A's registers are copied out to a_out, D to c (and D2 = A B to c + 4096 in modes 3 and 4).
// mode 0: each step waits before the next one loads A (right); 1: no wait in the loop: the next step's load
// overwrites A's registers while the previous group reads them; 2: A copied out right after the issue;
// 3: a second group reads the same A registers, one wait<0> for both (right); 4: as 3, but A copied out after
// a wait<1>, which retires only the first group.
extern "C" __global__ void a_regs(const bf16* a, const bf16* b, float* c, bf16* a_out, int mode, int iters) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    auto& sb = alloc.take<st_bf<64, 64>>();
    load<4>(sb, gl<const bf16>(b, 64, 64), {0, 0});
    fence_proxy_async();
    __syncthreads();
    const gl<const bf16> ga(a, 64, 64);
    const gl<bf16> gout(a_out, 64, 64);
    rt_bf<16, 64> ra;
    rt_fl<16, 64> d, d2;
#pragma unroll 1
    for (int i = 0; i < iters; ++i) {
        load(ra, ga, {warpgroup::warp(), 0});  // WRITE A
        warpgroup::mma_AB(d, ra, sb, false);  // ISSUE
        if (mode == 2) store(gout, ra, {warpgroup::warp(), 0});  // READ A
        if (mode >= 3) warpgroup::mma_AB(d2, ra, sb, false);  // ISSUE AGAIN
        if (mode == 4) {
            warpgroup::mma_async_wait<1>(d);
            store(gout, ra, {warpgroup::warp(), 0});  // READ A AFTER WAIT 1
        }
        if (mode >= 3) warpgroup::mma_async_wait<0>(d, d2, ra);
        else if (mode != 1) warpgroup::mma_async_wait<0>(d, ra);
    }
    warpgroup::mma_async_wait<0>(d, ra);
    store(gout, ra, {warpgroup::warp(), 0});  // READ A AFTER THE WAIT
    warpgroup::store(gl<float>(c, 64, 64), d, {0, 0});
    if (mode >= 3) warpgroup::store(gl<float>(c + 64 * 64, 64, 64), d2, {0, 0});
}

// D = A B, then a second wgmma whose A is D's own registers (their bits, reinterpreted) before the wait that
// retires D's group: an accumulator read too early, by a wgmma.
extern "C" __global__ void a_from_d(const bf16* a, const bf16* b, float* c) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    auto& sb = alloc.take<st_bf<64, 64>>();
    load<4>(sb, gl<const bf16>(b, 64, 64), {0, 0});
    fence_proxy_async();
    __syncthreads();
    rt_bf<16, 64> ra;
    load(ra, gl<const bf16>(a, 64, 64), {warpgroup::warp(), 0});
    rt_fl<16, 64> d, d2;
    warpgroup::mma_AB(d, ra, sb, false);  // ISSUE D
    warpgroup::mma_AB(d2, reinterpret_cast<const rt_bf<16, 64>&>(d), sb, false);  // A FROM D
    warpgroup::mma_async_wait<0>(d, d2);
    warpgroup::store(gl<float>(c, 64, 64), d2, {0, 0});
}
"""
STEPS = 2


def _line(text: str) -> int:
    return next(i for i, ln in enumerate(SRC.splitlines(), 1) if ln.rstrip().endswith(text))


@pytest.fixture(params=["ptx", "native"])
def engine(request: pytest.FixtureRequest) -> str:
    if request.param == "ptx":
        from tklab.toolchain import locate

        if not locate.nvrtc_available():
            pytest.skip("the interpreted engine needs NVRTC")
    return request.param


@functools.cache
def _module(engine: str) -> emu.EmuModule | emu.PtxModule:
    return emu.compile(SRC, name="a_regs.cu", engine=engine)


def _run(engine: str, mode: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, emu.LaunchResult]:
    rng = np.random.default_rng(5)
    a, b = (to_bf16_bits(rng.uniform(-1, 1, (64, 64)).astype(np.float32)) for _ in range(2))
    c = np.zeros((2, 64, 64), np.float32)
    a_out = np.zeros((64, 64), np.uint16)
    res = _module(engine)["a_regs"]((1,), (128,), (a, b, c, a_out, mode, STEPS), shared_mem=64 * 64 * 2 + 2048)
    return c, a_out, a, bf16_to_float32(a).astype(np.float64) @ bf16_to_float32(b), res


def _hazard(engine: str, mode: int) -> str:
    with pytest.raises(emu.AsyncHazard) as e:
        _run(engine, mode)
    msg = str(e.value)
    assert "before the wgmma.wait_group that retires it: the tensor cores read A's registers" in msg, msg
    assert "an accumulator register" not in msg, msg
    return msg


def test_touching_a_after_the_wait_that_retires_its_group_passes(engine: str) -> None:
    """Each step overwrites A's registers after the previous step's wait; A is read after the last one."""
    c, a_out, a, want, _ = _run(engine, 0)
    np.testing.assert_allclose(c[0], want, rtol=1e-4, atol=1e-4)
    assert (a_out == a).all()


def test_overwriting_a_before_the_wait_is_reported(engine: str) -> None:
    msg = _hazard(engine, 1)
    assert f"wrote a register of matrix A at a_regs.cu:{_line('// WRITE A')}" in msg, msg
    assert f"of the wgmma group that its warpgroup issued at a_regs.cu:{_line('// ISSUE')}" in msg, msg


def test_reading_a_before_the_wait_is_reported(engine: str) -> None:
    msg = _hazard(engine, 2)
    assert f"read a register of matrix A at a_regs.cu:{_line('// READ A')}" in msg, msg
    assert f"of the wgmma group that its warpgroup issued at a_regs.cu:{_line('// ISSUE')}" in msg, msg


def test_two_groups_may_read_the_same_a_registers(engine: str) -> None:
    c, a_out, a, want, res = _run(engine, 3)
    np.testing.assert_allclose(c[0], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(c[1], want, rtol=1e-4, atol=1e-4)
    assert (a_out == a).all()
    assert res.wgmma_max_in_flight == 2


def test_a_stays_pending_while_a_newer_group_reads_it(engine: str) -> None:
    """wait<1> retires the first group; the second still reads the same registers."""
    msg = _hazard(engine, 4)
    assert "read a register of matrix A at " in msg, msg
    assert f"of the wgmma group that its warpgroup issued at a_regs.cu:{_line('// ISSUE AGAIN')}" in msg, msg


def test_a_wgmma_reading_its_a_from_a_pending_accumulator_is_reported() -> None:
    """The native build: the wgmma statement loads its own operands, so the runtime checks its A registers
    against the pending accumulators at issue. (In PTX a float accumulator becomes a b32 A operand only through a
    mov, itself a read of the accumulator, which the interpreter reports where the compiler placed it.)"""
    a, b = (to_bf16_bits(np.ones((64, 64), np.float32)) for _ in range(2))
    with pytest.raises(emu.AsyncHazard) as e:
        _module("native")["a_from_d"]((1,), (128,), (a, b, np.zeros((64, 64), np.float32)),
                                      shared_mem=64 * 64 * 2 + 2048)
    msg = str(e.value)
    assert f"read an accumulator register at a_regs.cu:{_line('// A FROM D')}" in msg, msg
    assert f"of the wgmma group that its warpgroup issued at a_regs.cu:{_line('// ISSUE D')}" in msg, msg
