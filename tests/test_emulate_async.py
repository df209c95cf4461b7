"""Hopper's asynchrony under CPU emulation: what may happen late does happen late, and a kernel that leans on
timing luck fails with a message that names the thread, the line and the instruction.

Small kernels written here show each hazard and its correct variant (TMA boxes in flight, completion orders,
out-of-range boxes, TMA stores, fence.proxy.async, pending wgmma groups); then the course's own solutions
run under every TMA completion order, and the planted mistakes learners make in chapters 08 and 10 fail.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest
from answers import answer

from tklab import attention, gemm, tma_copy
from tklab.run.arrays import bf16_to_float32, to_bf16_bits

emu = pytest.importorskip("tklab.emulate")
ROOT = Path(__file__).resolve().parent.parent
ORDERS = tuple(emu.TMA_ORDERS)
STEP2 = gemm.STEPS["2_warp_specialised"]  # solutions/gemm_wgmma.cu as chapter 08 launches it

# ---- small kernels ---------------------------------------------------------------------------------------------
PROBES = r"""#include "tk.cuh"
using namespace tk;
using tile = st<float, 64, 64, swizzle_none>;

// Two TMA loads, one per stage and barrier, then every thread copies both stages out.
// mode 0: wait on both barriers; 1: wait only on stage 1's; 2: the wrong parity; 3: no wait.
extern "C" __global__ void two_stages(const __grid_constant__ CUtensorMap map, float* out, int mode) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    tile(&buf)[2] = alloc.take<tile[2]>();
    __shared__ mbarrier full[2];
    if (threadIdx.x == 0) {
        init_mbarrier(full[0], 1);
        init_mbarrier(full[1], 1);
        fence_mbarrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0)
        for (int s = 0; s < 2; ++s) {
            tma::expect(full[s], buf[s]);
            tma::load_async(buf[s], map, full[s], {s, 0});
        }
    __syncthreads();  // the loads are issued (not landed) before anyone reads
    if (mode == 0) { wait(full[0], 0); wait(full[1], 0); }
    if (mode == 1) wait(full[1], 0);
    if (mode == 2) { wait(full[0], 1); wait(full[1], 1); }
    for (int i = threadIdx.x; i < 2 * 64 * 64; i += blockDim.x)
        out[i] = buf[i / 4096].data[i % 4096];  // COPY OUT
}

// Threads fill a tile, one thread stores it with TMA as tile 1 of a 70-row tensor (rows 64..69: the rest clips).
// mode 0: fence.proxy.async first; 1: no fence; 2: the tile is overwritten before store_wait_read.
extern "C" __global__ void tma_store(const __grid_constant__ CUtensorMap map, int mode) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    tile& t = alloc.take<tile>();
    for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) t.data[i] = float(i);
    if (mode != 1) fence_proxy_async();
    __syncthreads();
    if (threadIdx.x == 0) {
        tma::store_async(map, t, {1, 0});
        tma::store_commit();
        if (mode == 2) t.data[5] = -1.0f;  // OVERWRITE
        tma::store_wait_read<0>();
    }
}

// One warpgroup: C = A B with wgmma, A and B written to shared memory by the threads.
// mode 0: right; 1: no fence.proxy.async; 2: no wait before reading the accumulator; 3: always accumulate
// (into an uninitialised accumulator); 4: two groups in flight, the older waited for with wait<1>;
// 5: A overwritten while the group is pending; 6: A overwritten by thread 0 after its own warp's wait, with no
// barrier (the other warps' waits are not ordered before it); 7: the same after a __syncthreads().
extern "C" __global__ void wgmma_probe(const bf16* a, const bf16* b, float* c, int mode) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    auto& sa = alloc.take<st_bf<64, 64>>();
    auto& sb = alloc.take<st_bf<64, 64>>();
    load<4>(sa, gl<const bf16>(a, 64, 64), {0, 0});
    load<4>(sb, gl<const bf16>(b, 64, 64), {0, 0});
    if (mode != 1) fence_proxy_async();
    __syncthreads();
    rt_fl<16, 64> d, d2;
    warpgroup::mma_AB(d, sa, sb, mode == 3);  // ISSUE
    if (mode == 4) warpgroup::mma_AB(d2, sa, sb, false);
    if (mode == 5 && threadIdx.x == 7) sa.data[0] = bf16(0.0f);  // OVERWRITE A
    if (mode == 4) warpgroup::mma_async_wait<1>(d);
    else if (mode != 2) warpgroup::mma_async_wait<0>(d);
    if (mode == 7) __syncthreads();
    if (mode >= 6 && threadIdx.x == 0) sa.data[0] = bf16(0.0f);  // OVERWRITE AFTER THE WAIT
    warpgroup::store(gl<float>(c, 64, 64), d, {0, 0});
    if (mode == 4) warpgroup::mma_async_wait<0>(d2);
}

// Warp 1's 32 lanes each write one float, then arrive on an mbarrier that counts `count` arrivals; thread 0
// waits for its first phase, then reads all 32. count 32: right. count 2: the first phase completes after two
// lanes (sixteen phases in all, so the parity flips back: a waiter may see phase 1 or miss it).
extern "C" __global__ void handoff(float* out, int count) {
    __shared__ mbarrier bar;
    __shared__ float data[32];
    if (threadIdx.x == 0) {
        init_mbarrier(bar, count);
        fence_mbarrier_init();
    }
    __syncthreads();
    if (threadIdx.x >= 32) {
        data[threadIdx.x - 32] = float(threadIdx.x);
        arrive(bar);
    }
    if (threadIdx.x == 0) {
        wait(bar, 0);
        for (int i = 0; i < 32; ++i) out[i] = data[i];  // READ
    }
}
"""
TILE_SMEM = 2 * 64 * 64 * 4 + 1024


def _line(src: str, text: str) -> int:
    return next(i for i, ln in enumerate(src.splitlines(), 1) if text in ln)


def _lines(src: str, text: str) -> list[int]:
    return [i for i, ln in enumerate(src.splitlines(), 1) if text in ln]


@functools.cache
def _probes() -> emu.EmuModule:
    return emu.compile(PROBES, name="probes.cu")


def _two_stages(mode: int, order: str) -> tuple[np.ndarray, np.ndarray]:
    src = np.arange(70 * 64, dtype=np.float32).reshape(70, 64)
    out = np.zeros(2 * 64 * 64, np.float32)
    tmap = emu.tensor_map(src, (64, 64), swizzle=0)
    _probes()["two_stages"]((1,), (128,), (tmap, out, mode), shared_mem=TILE_SMEM, tma_order=order)
    want = np.zeros((128, 64), np.float32)
    want[:70] = src  # rows past the tensor's end arrive as zeros
    return out.reshape(128, 64), want


@pytest.mark.parametrize("order", ORDERS)
def test_tma_loads_that_are_waited_for_pass_and_out_of_range_rows_arrive_as_zeros(order: str) -> None:
    out, want = _two_stages(0, order)
    np.testing.assert_array_equal(out, want)


def test_loads_of_different_stages_complete_in_any_order() -> None:
    """Waiting for stage 1 says nothing about stage 0: in issue order it has landed (what a quiet GPU mostly
    does), delayed or reversed it is still in flight, and reading it is reported."""
    out, want = _two_stages(1, "in_order")
    np.testing.assert_array_equal(out, want)
    for order in ("delayed", "reversed"):
        with pytest.raises(emu.AsyncHazard) as e:
            _two_stages(1, order)
        msg = str(e.value)
        assert "still in flight" in msg and "the TMA load that thread (0) issued at probes.cu:" in msg
        assert f"read it at probes.cu:{_line(PROBES, '// COPY OUT')}" in msg and "its mbarrier full" in msg


@pytest.mark.parametrize("mode,what", [(2, "the wrong parity"), (3, "no wait")])
def test_reading_a_box_without_its_phase_is_reported_before_the_load_lands(mode: int, what: str) -> None:
    with pytest.raises(emu.AsyncHazard, match=r"read it at probes\.cu:\d+ while the TMA load .* is still in flight"):
        _two_stages(mode, "delayed")


def test_an_unknown_tma_order_is_refused() -> None:
    with pytest.raises(ValueError, match="tma_order='sideways'; choose one of in_order, delayed, reversed"):
        _two_stages(0, "sideways")


def _tma_store(mode: int) -> np.ndarray:
    out = np.full((70, 64), -7.0, np.float32)
    _probes()["tma_store"]((1,), (128,), (emu.tensor_map(out, (64, 64), swizzle=0), mode), shared_mem=TILE_SMEM)
    return out


def test_a_fenced_tma_store_clips_at_the_tensor_edge() -> None:
    out = _tma_store(0)
    np.testing.assert_array_equal(out[64:], np.arange(6 * 64, dtype=np.float32).reshape(6, 64))
    assert (out[:64] == -7.0).all()


def test_a_tma_store_of_ordinary_stores_without_fence_proxy_async_is_reported() -> None:
    with pytest.raises(emu.AsyncHazard) as e:
        _tma_store(1)
    msg = str(e.value)
    assert "missing fence.proxy.async" in msg and "wrote it with an ordinary store at probes.cu:" in msg
    assert f"reads it at probes.cu:{_line(PROBES, 'tma::store_async(map, t')}" in msg


def test_overwriting_a_tma_stores_source_before_wait_read_is_reported() -> None:
    with pytest.raises(emu.AsyncHazard) as e:
        _tma_store(2)
    msg = str(e.value)
    assert f"thread (0) wrote it at probes.cu:{_line(PROBES, '// OVERWRITE')}" in msg
    assert "TMA store that thread (0) issued at probes.cu:" in msg and "cp.async.bulk.wait_group.read" in msg


def _wgmma(mode: int) -> tuple[np.ndarray, np.ndarray, emu.LaunchResult]:
    rng = np.random.default_rng(1)
    a, b = (to_bf16_bits(rng.uniform(-1, 1, (64, 64)).astype(np.float32)) for _ in range(2))
    c = np.zeros((64, 64), np.float32)
    res = _probes()["wgmma_probe"]((1,), (128,), (a, b, c, mode), shared_mem=2 * 64 * 64 * 2 + 2048)
    return c, bf16_to_float32(a).astype(np.float64) @ bf16_to_float32(b), res


def test_a_waited_wgmma_group_is_right_and_one_group_was_in_flight() -> None:
    c, want, res = _wgmma(0)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    assert res.wgmma_max_in_flight == 1


def test_two_groups_in_flight_are_counted_and_wait_1_retires_the_older() -> None:
    c, want, res = _wgmma(4)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    assert res.wgmma_max_in_flight == 2


def test_an_accumulator_read_before_its_wait_is_reported() -> None:
    with pytest.raises(emu.AsyncHazard) as e:
        _wgmma(2)
    msg = str(e.value)
    assert "read an accumulator register at probes.cu:" in msg and "before the wgmma.wait_group" in msg
    assert f"wgmma group that its warpgroup issued at probes.cu:{_line(PROBES, '// ISSUE')}" in msg


def test_accumulating_into_an_uninitialised_accumulator_is_garbage() -> None:
    c, want, _ = _wgmma(3)
    assert not np.allclose(c, want, rtol=1e-2, atol=1e-2)


def test_wgmma_reading_ordinary_stores_without_fence_proxy_async_is_reported() -> None:
    with pytest.raises(emu.AsyncHazard, match=r"missing fence\.proxy\.async .* wgmma\.mma_async reading its operand "
                       r"reads it at probes\.cu:" + str(_line(PROBES, "// ISSUE"))):
        _wgmma(1)


def test_overwriting_an_operand_of_a_pending_wgmma_group_is_reported() -> None:
    with pytest.raises(emu.AsyncHazard) as e:
        _wgmma(5)
    msg = str(e.value)
    assert f"thread (7) wrote it at probes.cu:{_line(PROBES, '// OVERWRITE A')}" in msg
    assert f"wgmma group that warpgroup 0 issued at probes.cu:{_line(PROBES, '// ISSUE')}" in msg


def test_a_warps_wgmma_wait_retires_only_that_warps_part_of_the_group() -> None:
    """wgmma.wait_group orders the warp that executes it: thread 0 may overwrite an operand after its own warp's
    wait only once a barrier orders the other three warps' waits before it."""
    with pytest.raises(emu.AsyncHazard) as e:
        _wgmma(6)
    msg = str(e.value)
    assert f"thread (0) wrote it at probes.cu:{_line(PROBES, '// OVERWRITE AFTER THE WAIT')}" in msg
    assert re.search(r"wgmma\.wait_group at probes\.cu:\d+ .*of thread \((32|64|96)\)'s warp retired it", msg), msg
    c, want, _ = _wgmma(7)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


def test_a_phase_completed_by_surplus_arrivals_lets_its_waiter_go_early() -> None:
    """A waiter may see the first phase its arrivals complete, even when later arrivals complete more phases
    (and flip the parity back) before it looks again: then it reads what the late lanes had not yet handed over."""
    out = np.zeros(32, np.float32)
    _probes()["handoff"]((1,), (64,), (out, 32))
    np.testing.assert_array_equal(out, np.arange(32, 64, dtype=np.float32))
    with pytest.raises(emu.SharedRace, match=rf"thread \(0\) read it at probes\.cu:{_line(PROBES, '// READ')}.*"
                       r"Note: mbarrier bar .*completed \d+ more phase\(s\) .* more arrivals than the 2 it counts"):
        _probes()["handoff"]((1,), (64,), (np.zeros(32, np.float32), 2))


def test_the_emulators_shared_memory_limit_is_the_courses(monkeypatch: pytest.MonkeyPatch) -> None:
    """One source for a block's shared memory (tklab.run.limits): a launch may take all of it, not a byte more,
    and a changed table changes the emulator's limit too."""
    from tklab.run import limits

    handoff, out = _probes()["handoff"], np.zeros(32, np.float32)
    handoff((1,), (64,), (out, 32), shared_mem=limits.SHARED_OPTIN[90] - 1024)  # + its static shared memory
    assert out[0] == 32.0
    with pytest.raises(ValueError, match=f"more than a block can have on sm_90a \\({limits.SHARED_OPTIN[90]} B\\)"):
        handoff((1,), (64,), (out, 32), shared_mem=limits.SHARED_OPTIN[90] + 1)
    monkeypatch.setitem(limits.SHARED_OPTIN, 90, 100 * 1024)
    with pytest.raises(ValueError, match=r"\(102400 B\)"):
        handoff((1,), (64,), (out, 32), shared_mem=150 * 1024)


# ---- the course's solutions, and the mistakes learners plant in them ------------------------------------------
CH07 = (ROOT / "solutions" / "ch07_tma_ring" / "ch07_tma_ring.cu").read_text()
CH08 = (ROOT / "solutions" / "ch08_wgmma" / "ch08_wgmma.cu").read_text()
FLASH = (ROOT / "solutions" / "ch10_flash" / "ch10_flash.cu").read_text()


def _whole(src: str, code: str) -> str:
    """The one line of ``src`` holding ``code``, whole: its indentation, comment and newline (an answer line that
    tests/answers.py read from the solution, as the file writes it)."""
    (line,) = [ln + "\n" for ln in src.splitlines() if code in ln]
    return line


def _planted(src: str, old: str, new: str) -> str:
    out = src.replace(old, new)
    assert out != src, f"the planted mistake no longer applies: {old!r}"
    return out


@functools.cache
def _compiled(src: str, name: str, options: tuple[str, ...] = ()) -> emu.EmuModule:
    return emu.compile(src, name=name, options=options)


def _ch07(src: str, order: str) -> bool:
    """300 x 68 floats, two blocks: each walks several tiles through the two-stage ring (it wraps)."""
    x = np.random.default_rng(0).standard_normal((300, 68)).astype(np.float32)
    y = np.full_like(x, np.nan)
    blocks, threads, shared = tma_copy.ring_launch(*x.shape, stages=2, sms=2)
    src_map = emu.tensor_map(x, (tma_copy.TILE_ROWS, tma_copy.TILE_COLS), swizzle=0)
    _compiled(src, "ch07_tma_ring.cu")["ring_copy"]((blocks,), (threads,), (src_map, y, *x.shape), shared_mem=shared,
                                                    tma_order=order)
    return bool(np.array_equal(x, y))


@pytest.mark.parametrize("order", ORDERS)
def test_ch07_solution_passes_and_the_wrong_parity_fails_under_every_tma_order(order: str) -> None:
    assert _ch07(CH07, order)
    right = answer("ch07_tma_ring", "wait(")  # the consumer's wait, read from the solution
    wrong = _planted(CH07, right, right.replace("at.phase)", "at.phase ^ 1)"))
    with pytest.raises(emu.EmulationError, match=r"ch07_tma_ring\.cu:\d+.*ch07_tma_ring\.cu:\d+"):
        _ch07(wrong, order)


def _ch08(src: str, order: str = "delayed") -> tuple[float, emu.LaunchResult]:
    """64 x 256 x 320: five K-slices through a four-stage ring, so a stage is refilled."""
    rng = np.random.default_rng(6)
    m, n, k = 64, 256, 320
    a, b = (to_bf16_bits(rng.uniform(-1, 1, s).astype(np.float32)) for s in ((m, k), (k, n)))
    c = np.full((m, n), 0xFFFF, np.uint16)
    step = gemm.STEPS["1_one_warpgroup"]  # ch08_wgmma.cu as chapter 08 launches it
    maps = [emu.tensor_map(x, box, dtype="bfloat16") for x, box in zip((a, b), gemm.tma_boxes(step), strict=True)]
    mod = _compiled(src, "ch08_wgmma.cu")
    facts = gemm.launch_facts(mod)
    res = mod["gemm"](gemm.tile_grid(step, m, n), (facts["threads"],), (*maps, c, m, n, k),
                      shared_mem=facts["shared_bytes"], tma_order=order)
    ref = bf16_to_float32(a).astype(np.float64) @ bf16_to_float32(b)
    return float(np.abs(bf16_to_float32(c) - ref).max()), res


@pytest.mark.parametrize("order", ORDERS)
def test_ch08_solution_passes_under_every_tma_order(order: str) -> None:
    err, res = _ch08(CH08, order)
    assert err < 0.1 and res.wgmma_max_in_flight == 1


def test_ch08_waiting_once_after_the_loop_is_reported_when_the_stage_is_refilled() -> None:
    wait, after = _whole(CH08, answer("ch08_wgmma", "mma_async_wait")), "    // BEGIN SOLUTION hint: the warpgroup"
    src = _planted(CH08, wait + "        // END SOLUTION\n", "        // END SOLUTION\n")
    src = _planted(src, after, wait.lstrip(" ").rjust(len(wait) - 4) + after)  # once, after the loop
    with pytest.raises(emu.AsyncHazard) as e:
        _ch08(src)
    msg = str(e.value)
    assert f"thread (0) wrote it at ch08_wgmma.cu:{_line(src, 'tma::load_async(stages[slot].a')}" in msg
    assert f"wgmma group that warpgroup 0 issued at ch08_wgmma.cu:{_line(src, 'warpgroup::mma_AB(acc')}" in msg


def test_ch08_refilling_without_the_barrier_after_the_wait_is_reported() -> None:
    """The leader's own warp has waited for the group, the other three warps' waits are not ordered before its
    refill (each warp's wgmma.wait_group retires only its part): the barrier is what makes the refill safe."""
    src = _planted(CH08, "\n        __syncthreads();  // every warp's products", "\n        // every warp's products")
    with pytest.raises(emu.AsyncHazard) as e:
        _ch08(src)
    msg = str(e.value)
    assert f"thread (0) wrote it at ch08_wgmma.cu:{_line(src, 'tma::load_async(stages[slot].a')}" in msg
    assert re.search(r"wgmma\.wait_group at ch08_wgmma\.cu:\d+ .*of thread \((32|64|96)\)'s warp retired it", msg), msg


def test_ch08_always_accumulating_adds_the_uninitialised_accumulator() -> None:
    right = answer("ch08_wgmma", "mma_AB(acc")
    src = _planted(CH08, right, right.replace("k > 0", "true"))
    err, _ = _ch08(src)
    assert err > 1.0


def _flash(src: str, order: str = "delayed", options: tuple[str, ...] = ()) -> tuple[float, emu.LaunchResult]:
    """One head of 256 keys, head dim 128: two key blocks through the two-stage ring."""
    rng = np.random.default_rng(7)
    n, d = 256, 128
    cfg = attention.build("hopper", d)
    q, k, v = (to_bf16_bits(rng.standard_normal((1, 1, n, d)).astype(np.float32)) for _ in range(3))
    o, lse = np.full((1, 1, n, d), 0xFFFF, np.uint16), np.full((1, 1, n), np.nan, np.float32)
    bc = int(dict(opt[2:].split("=") for opt in cfg.options)["BC"])
    maps = [emu.tensor_map(x, (rows, d), dtype="bfloat16") for x, rows in ((q, 64), (k, bc), (v, bc), (o, 64))]
    mod = _compiled(src, "ch10_flash.cu", tuple(cfg.options) + options)
    res = mod["flash_fwd"](((n + cfg.block_rows - 1) // cfg.block_rows, 1, 1), (cfg.threads,),
                           (*maps, lse, 1, n, np.float32(1 / np.sqrt(d)), 0), shared_mem=cfg.shared_bytes,
                           tma_order=order)
    ref, _ = attention.naive(*(bf16_to_float32(x) for x in (q, k, v)), causal=False)
    return float(np.abs(bf16_to_float32(o) - ref).max()), res


@pytest.mark.parametrize("order", ORDERS)
def test_ch10_solution_passes_under_every_tma_order_with_two_groups_in_flight(order: str) -> None:
    err, res = _flash(FLASH, order)
    assert err < 2e-2 and res.wgmma_max_in_flight == 2


def test_ch10_plain_schedule_has_one_group_in_flight() -> None:
    err, res = _flash(FLASH, options=("-DSCHEDULE=0",))
    assert err < 2e-2 and res.wgmma_max_in_flight == 1


LOOP_K_WAIT = _whole(FLASH, answer("ch10_flash", "mma_async_wait<1>", "rows.s"))
LOOP_K_RELEASE = "        sm.k_pipe.release(at_k.stage);\n"
LOOP_K_RELEASE_AFTER_SOFTMAX = _whole(FLASH, answer("ch10_flash", "exponentiated()) sm.k_pipe"))
LOOP_V_WAIT = "        warpgroup::mma_async_wait<0>(rows.o, rows.p);\n"
LOOP_V_RELEASE = "        sm.v_pipe.release(at_v.stage);\n        rows.rescale_and_round();\n"


def _issued_at(src: str, call: str) -> list[int]:
    """The lines a report may name for ``call``: its own, and the ``in_turn(...)`` call whose lambda holds it
    (the kernel's outermost frame, which the emulator names)."""
    lines = src.splitlines()
    out = []
    for i in _lines(src, call):
        out.append(i)
        out += [j for j in (i - 1, i - 2) if "in_turn<" in lines[j - 1]][:1]
    return out


def test_ch10_without_the_v_stage_wait_reads_a_box_in_flight() -> None:
    turn = "        in_turn<pingpong>(me, [&] {\n            warpgroup::mm_ABt"
    src = _planted(FLASH, "        wait(sm.v_pipe.full[at_v.stage], at_v.phase);\n" + turn, turn)
    with pytest.raises(emu.AsyncHazard) as e:
        _flash(src)
    msg = str(e.value)
    assert any(f"read it at ch10_flash.cu:{i} " in msg for i in _issued_at(src, "mma_AB(rows.o, rows.p, sm.v[at_v"))
    assert f"TMA load that thread (0) issued at ch10_flash.cu:{_line(src, 'map_v, sm.v_pipe.full')}" in msg


def test_ch10_releasing_k_before_its_group_is_waited_for_is_reported() -> None:
    src = _planted(FLASH, LOOP_K_RELEASE_AFTER_SOFTMAX, "")
    src = _planted(src, LOOP_K_WAIT, LOOP_K_RELEASE + LOOP_K_WAIT)
    with pytest.raises(emu.AsyncHazard) as e:
        _flash(src)
    msg = str(e.value)
    release = src[:src.index(LOOP_K_RELEASE + LOOP_K_WAIT)].count("\n") + 1
    issues = _issued_at(src, "warpgroup::mm_ABt(rows.s, sm.q[me]")
    assert "(mbarrier arrive on " in msg and f"ch10_flash.cu:{release} " in msg
    assert any(f"wgmma group that its warpgroup issued at ch10_flash.cu:{i} " in msg for i in issues)
    assert f", which the TMA load at ch10_flash.cu:{_line(src, 'map_k, sm.k_pipe.full')} " in msg  # K's stage


def test_ch10_releasing_v_before_its_group_is_waited_for_is_reported() -> None:
    src = _planted(FLASH, LOOP_V_WAIT + LOOP_V_RELEASE,
                   "        sm.v_pipe.release(at_v.stage);\n" + LOOP_V_WAIT + "        rows.rescale_and_round();\n")
    with pytest.raises(emu.AsyncHazard, match=r"hands back .* while the wgmma group that its warpgroup issued at "
                       r"ch10_flash\.cu:\d+ .*may still read it"):
        _flash(src)


def test_ch10_a_lapping_producer_is_caught_reading_a_box_in_flight() -> None:
    """The producer that skips the empty barrier (tests/test_emulate_bugs.py hangs in issue order): under the
    default order its second load of stage 0 is still in flight when the consumers read the stage."""
    src = (ROOT / "solutions" / "gemm_wgmma.cu").read_text()
    broken = _planted(src, "                wait(pipe.empty[at.stage], at.phase ^ 1);\n", "")
    m, n, k = 128, 256, 64 * 6
    a, b = to_bf16_bits(np.ones((m, k), np.float32)), to_bf16_bits(np.ones((k, n), np.float32))
    maps = [emu.tensor_map(x, box, dtype="bfloat16") for x, box in zip((a, b), gemm.tma_boxes(STEP2), strict=True)]
    mod = _compiled(broken, "gemm_wgmma.cu")
    facts = gemm.launch_facts(mod)
    with pytest.raises(emu.AsyncHazard, match=r"while the TMA load that thread \(0\) issued at gemm_wgmma\.cu:\d+ .* "
                       r"is still in flight"):
        mod["gemm"]((1,), (facts["threads"],), (*maps, np.zeros((m, n), np.uint16), m, n, k),
                    shared_mem=facts["shared_bytes"])
