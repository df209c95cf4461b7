"""Planted learner bugs, each caught under CPU emulation with a message that names its cause.

Each test takes a course solution, breaks it the way learners do (a missing ``__syncthreads()``, an
off-by-one bound, a wrong index, a barrier nobody arrives at, an endless loop, a missing wait), and
checks what the emulator says: the kind of error, the threads, the element and the lines.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tklab import gemm
from tklab.run.arrays import to_bf16_bits

emu = pytest.importorskip("tklab.emulate")
ROOT = Path(__file__).resolve().parent.parent
CH02 = (ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu").read_text()


def _line(src: str, text: str) -> int:
    return next(i for i, ln in enumerate(src.splitlines(), 1) if text in ln)


def _ch02(src: str, m: int = 40, n: int = 40, k: int = 64) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    emu.compile(src, name="ch02_smem_tiling.cu")["smem_matmul"](((n + 31) // 32, (m + 31) // 32), (32, 32),
                                                                (a, b, c, m, n, k))
    return c, a.astype(np.float64) @ b


def test_the_solution_itself_is_clean() -> None:
    c, ref = _ch02(CH02)
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4)


def test_missing_syncthreads_after_the_copy_is_a_race_naming_both_threads_and_lines() -> None:
    src = CH02.replace("        __syncthreads();  // the tiles are complete before anyone reads them\n", "")
    with pytest.raises(emu.SharedRace) as e:
        _ch02(src)
    msg = str(e.value)
    write_line, read_line = _line(src, "As[ty][tx] = "), _line(src, "acc += As[ty][k]")
    assert "shared-memory race" in msg and "As[0][" in msg
    assert f"ch02_smem_tiling.cu:{write_line}" in msg and f"ch02_smem_tiling.cu:{read_line}" in msg
    assert "thread (0, 0)" in msg and "thread (1, 0)" in msg and "__syncthreads()" in msg


def test_missing_syncthreads_before_the_next_copy_is_a_read_after_write_race() -> None:
    src = CH02.replace("        __syncthreads();  // everyone is done with these tiles before the next step overwrites "
                       "them\n", "")
    assert src != CH02
    with pytest.raises(emu.SharedRace, match=r"read-after-write\) on As\[0\]\[0\].*wrote it.*read it"):
        _ch02(src)


def test_off_by_one_bound_is_an_out_of_bounds_write_naming_the_argument_and_element() -> None:
    src = CH02.replace("if (row < M && col < N) C[row * N + col] = acc;",
                       "if (row <= M && col < N) C[row * N + col] = acc;")
    with pytest.raises(emu.OutOfBounds) as e:
        _ch02(src)
    msg = str(e.value)
    assert "wrote 4 bytes at C[1600]" in msg and "past the end of argument 2 'float* C' (40×40 float32)" in msg
    assert f"ch02_smem_tiling.cu:{_line(src, 'C[row * N + col] = acc')}" in msg
    assert e.value.block == (0, 1, 0) and e.value.thread == (0, 8, 0)


def test_wrong_index_runs_and_gives_a_wrong_result() -> None:
    src = CH02.replace("acc += As[ty][k] * Bs[k][tx]", "acc += As[ty][k] * Bs[tx][k]")
    c, ref = _ch02(src)
    assert not np.isnan(c).any() and not np.allclose(c, ref, rtol=1e-4, atol=1e-4)


def test_an_mbarrier_nobody_completes_is_a_deadlock_saying_who_waits_for_what() -> None:
    src = r"""#include "tk.cuh"
extern "C" __global__ void k(float* out) {
  __shared__ tk::mbarrier bar;
  if (threadIdx.x == 0) tk::init_mbarrier(bar, 2);   // two arrivals expected ...
  __syncthreads();
  if (threadIdx.x == 0) tk::arrive(bar);             // ... one comes
  tk::wait(bar, 0);
  out[threadIdx.x] = 1.0f;
}"""
    with pytest.raises(emu.Deadlock) as e:
        emu.compile(src, name="mbar.cu")["k"]((1,), (64,), (np.zeros(64, np.float32),))
    msg = str(e.value)
    assert "threads 0..63 wait at an mbarrier wait on bar" in msg
    assert "still expects 1 of 2 arrivals" in msg and "mbar.cu:7" in msg


def test_an_endless_loop_hits_the_time_limit_and_says_where() -> None:
    src = 'extern "C" __global__ void k(int* x) {\n  int i = 0;\n  while (x[0] == 0) { i++; }\n  x[1] = i;\n}\n'
    with pytest.raises(emu.TimeLimit, match=r"still running at spin\.cu:3 when the time limit ran out"):
        emu.compile(src, name="spin.cu")["k"]((1,), (32,), (np.zeros(2, np.int32),), time_limit=1.0)


def test_reading_before_cp_async_lands_is_reported() -> None:
    src = (ROOT / "solutions" / "ch06_tiles" / "ch06_tiles.cu").read_text().replace("        cp_async_wait<0>();\n", "")
    a, b = to_bf16_bits(np.ones((128, 32), np.float32)), to_bf16_bits(np.ones((32, 128), np.float32))
    c = np.full((128, 128), np.nan, np.float32)
    res = emu.compile(src, name="ch06_tiles.cu")["tiles_gemm"]((1, 1), (128,), (a, b, c, 128, 128, 32))
    assert np.isnan(c).all()  # the copies land only at the thread's exit: the mma read garbage (NaN)
    assert any("read a_s before any thread wrote it" in w for w in res.warnings)


def test_a_producer_that_skips_the_empty_barrier_laps_the_consumers_and_they_hang() -> None:
    """Without waiting for a free stage the producer completes phase 0 and phase 1 of full[0] before any
    consumer looks: parity 0 reads as "not yet" again, as on the GPU, and the message shows the lap. (With
    loads landing in issue order; under the default "delayed" order the consumer instead reads the lapped
    load's box while it is in flight: tests/test_emulate_async.py.)"""
    src = (ROOT / "solutions" / "gemm_wgmma.cu").read_text()
    broken = src.replace("                wait(pipe.empty[at.stage], at.phase ^ 1);\n", "")
    assert broken != src
    m, n, k = 128, 256, 64 * 6  # six K steps: the four-stage ring wraps
    a, b = to_bf16_bits(np.ones((m, k), np.float32)), to_bf16_bits(np.ones((k, n), np.float32))
    c = np.zeros((m, n), np.uint16)
    step = gemm.STEPS["2_warp_specialised"]  # gemm_wgmma.cu as chapter 08 launches it
    maps = [emu.tensor_map(x, box, dtype="bfloat16") for x, box in zip((a, b), gemm.tma_boxes(step), strict=True)]
    mod = emu.compile(broken, name=step.source)
    facts = gemm.launch_facts(mod)
    with pytest.raises(emu.Deadlock, match=r"threads 128\.\.\d+ wait at an mbarrier wait on pipe .*for phase parity 0 "
                       r"\(it has completed 2 phases"):
        mod["gemm"]((1,), (facts["threads"],), (*maps, c, m, n, k), shared_mem=facts["shared_bytes"],
                    tma_order="in_order")


def test_exited_lane_at_a_warp_shuffle_is_reported() -> None:
    src = r"""
extern "C" __global__ void k(int* x) {
  if (threadIdx.x == 5) return;
  x[threadIdx.x] = __shfl_sync(0xffffffffu, int(threadIdx.x), 0);
}"""
    with pytest.raises(emu.Deadlock, match=r"waits for lane 5 of its warp, which has already exited"):
        emu.compile(src, name="shfl.cu")["k"]((1,), (32,), (np.zeros(32, np.int32),))
