"""Issue 40, item 4 -- guards in the attention kernels and the tile library, each shown to catch its mistake:
named-barrier ranges checked disjoint at compile time, per-warp ``ds_full`` arrivals, a debug-build bound on
mbarrier waits, equal turn counts between consumers, and DQ_MODE 2's memory checked before it is allocated.
(The per-warp ds_full arrival is held by tests/test_attention_bwd.py: the emulated DQ_LAG/PINGPONG cases and
LAG_MISTAKES, among them per-thread arrivals on the per-warp count.)"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tklab
from tklab.kernels import attention_bwd as ab
from tklab.toolchain.compiler import CompileError


def _compile_bwd(text: str, b: ab.BwdBuild) -> object:
    return tklab.compile(text, arch="sm_90a", name=ab.KERNEL.name, options=b.options)


# ---- named-barrier ranges --------------------------------------------------------------------------------
@pytest.mark.parametrize(("head_dim", "old", "new", "names"), [
    # the chapter's kernel: the store barriers moved onto the guard barriers' second id
    (64, "STORE_BARRIERS = 5;", "STORE_BARRIERS = 3;", "guard_ids and store_ids"),
    # the turns variant (d = 128's build without FA3's layout, SWAPAB=0): its turns onto the chapter's store barriers
    (128, "warpgroup::turns<8, 2>", "warpgroup::turns<6, 2>", "lag_turn::ids and store_ids"),
    # a range pushed past barrier 15
    (64, "STORE_BARRIERS = 5;", "STORE_BARRIERS = 15;", "consumers_ids or store_ids is outside"),
])
def test_overlapping_barrier_ranges_stop_the_build(head_dim: int, old: str, new: str, names: str) -> None:
    b = ab.build(head_dim, SWAPAB=0)  # the chapter's kernel (d = 64) and its turns variant (d = 128)
    text = ab.source(b)
    assert text.count(old) == 1, f"the planted mistake no longer applies: {old!r} not found once"
    _compile_bwd(text, b)  # as shipped: compiles
    with pytest.raises(CompileError) as err:
        _compile_bwd(text.replace(old, new), b)
    assert names in str(err.value), str(err.value)[:2000]


# ---- DQ_MODE 2's memory --------------------------------------------------------------------------------
def test_dq_slot_bytes_follow_the_layout() -> None:
    """B x H x (key blocks x slots per key block) x (query blocks x 64) x d x 4: the issue's 16 GiB at N = 16k,
    H = 16, d = 128; d = 64 keeps a slot per consumer (no column split); DQ_MODE 1 one accumulator (d = 128, where dQ's
    parts are parked in register order: in whole 64-query steps)."""
    gib = 1 << 30
    assert ab.dq_scratch_bytes(1, 16, 16384, ab.build(128, DQ_MODE=2)) == 16 * gib
    n = 1000  # awkward: 8 key blocks of 128, 16 query blocks (1024 rows)
    assert ab.dq_scratch_bytes(2, 3, n, ab.build(64, DQ_MODE=2)) == 2 * 3 * (8 * 2) * 1024 * 64 * 4
    assert ab.build(128).dq_fragments and not ab.build(64).dq_fragments
    assert ab.dq_scratch_bytes(2, 3, n, ab.build(128, DQ_MODE=1)) == 2 * 3 * 1024 * 128 * 4  # 16 steps of 64
    assert ab.dq_scratch_bytes(2, 3, n, ab.build(128, DQ_FRAGMENTS=0)) == 2 * 3 * n * 128 * 4
    assert ab.dq_scratch_bytes(2, 3, n, ab.build(64, DQ_MODE=1)) == 2 * 3 * n * 64 * 4


class _DeviceArray:
    """Shape, strides and dtype of a C-contiguous device array, without a device (neither NumPy nor torch, so
    the launcher takes the GPU path)."""

    def __init__(self, shape: tuple[int, ...], dtype: type) -> None:
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.strides = tuple(int(np.prod(shape[i + 1:])) * self.dtype.itemsize for i in range(len(shape)))


def _prepare(monkeypatch: pytest.MonkeyPatch, free: int, allocated: list[tuple[int, ...]], n: int = 16384,
             h: int = 16, d: int = 128) -> None:
    """prepare() of a DQ_MODE 2 backward at B = 1 with ``free`` device bytes faked; allocations are recorded
    and fail."""

    def no_alloc(like: object, shape: tuple[int, ...], dtype: str, strides: object = None) -> object:
        allocated.append(shape)
        raise RuntimeError(f"allocated {shape}")

    monkeypatch.setattr(ab, "free_device_bytes", lambda like: free)
    monkeypatch.setattr(ab, "_empty", no_alloc)
    x = _DeviceArray((1, h, n, d), np.uint16)
    lse = _DeviceArray((1, h, n), np.float32)
    ab.prepare(x, x, x, x, lse, x, x, x, x, DQ_MODE=2)


def test_dq_mode_2_refused_before_allocating(monkeypatch: pytest.MonkeyPatch) -> None:
    gib, allocated = 1 << 30, []
    with pytest.raises(MemoryError) as err:
        _prepare(monkeypatch, 8 * gib, allocated)
    msg = str(err.value)
    assert f"{16 * gib:,} B" in msg and f"{8 * gib:,} B" in msg and "DQ_MODE=1" in msg, msg
    assert allocated == []
    # with room for it the launcher goes on to allocate (here: the fake allocator's error)
    with pytest.raises(RuntimeError, match="allocated"):
        _prepare(monkeypatch, 17 * gib, allocated)
    assert allocated


# ---- a debug-build bound on mbarrier waits ---------------------------------------------------------------
_STUCK = r'''
#include "tk.cuh"
using namespace tk;
extern "C" __global__ void stuck(int* out) {
    __shared__ mbarrier ready;
    if (threadIdx.x == 0) {
        init_mbarrier(ready, 2);
        fence_mbarrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) arrive(ready);  // one of the two arrivals the phase needs: it never completes
    wait(ready, 0 NAME);
    out[threadIdx.x] = 1;
}'''


@pytest.mark.parametrize("name", ['"ready"', None])
def test_debug_waits_trap_naming_the_barrier(name: str | None, capfd: pytest.CaptureFixture[str]) -> None:
    from tklab import emulate
    from tklab.emulate.errors import Deadlock, EmulationError

    src = _STUCK.replace("NAME", f", {name}" if name else "")
    out = np.zeros(64, np.int32)
    # the default build: the wait spins on; the emulator calls it a deadlock (a GPU would hang)
    with pytest.raises(Deadlock):
        emulate.compile(src, arch="sm_90a", name="stuck.cu")["stuck"]((1,), (64,), (out,))
    capfd.readouterr()
    with pytest.raises(EmulationError) as err:
        emulate.compile(src, arch="sm_90a", name="stuck.cu", options=["-DTK_DEBUG_WAITS=100"])["stuck"](
            (2,), (64,), (out,))
    assert err.value.report.get("kind") == "trap", err.value.report
    printed = capfd.readouterr().out
    line = 1 + _STUCK.split("\n").index("    wait(ready, 0 NAME);")
    shown = re.escape("ready" if name else "(unnamed)")
    expected = (f"tk::wait gave up after 100 polls: mbarrier {shown} at shared offset "
                r"\d+, phase parity 0, waited for at stuck.cu:" f"{line}, " r"block \(\d, 0, 0\) thread \d+")
    assert re.search(expected, printed), printed
    assert out.sum() == 0


# ---- consumers walk equal block counts -----------------------------------------------------------------
_CONSUMER_ME = ("const int me = __shfl_sync(0xffffffffu, warpgroup::groupid() - 1, 0), other = 1 - me, "
                "w = warpgroup::warp();")
UNEQUAL = {
    # the variant's consumers take turns (PINGPONG=1, d = 64): consumer 1 starts a block later
    "turns": (64, {"PINGPONG": 1}, "lag_turn",
              "const int q_first = causal ? kv * KV_BLOCK / BR : 0;\n    " + _CONSUMER_ME,
              _CONSUMER_ME + "\n    const int q_first = (causal ? kv * KV_BLOCK / BR : 0) + me;  // PLANTED",
              r"turns<8, 2>: consumer group 1 walks 3 steps, group 0 walks 4"),
    # the chapter's kernel at d = 128: the consumers meet every step on CONSUMERS_BARRIER (DQ_SPLIT)
    "meetings": (128, {"PINGPONG": 0}, "chapter",
                 "const int q_first = causal ? kv * KV_BLOCK / BR : 0;\n#if UNIFORM",
                 "const int q_first = (causal ? kv * KV_BLOCK / BR : 0) + warpgroup::groupid() - 1;  // PLANTED\n"
                 "#if UNIFORM",
                 r"equal_steps<1, 2>: group 1 walks 3 steps, group 0 walks 4: unequal counts hang named barrier 1"),
}


def _launch_main(src: str, cfg: ab.BwdBuild, options: tuple[str, ...], n: int = 256) -> None:
    """flash_bwd alone on the emulator (B = H = 1, not causal: 4 query blocks for each consumer to walk)."""
    from tklab import emulate

    d = cfg.head_dim
    mod = emulate.compile(src, arch="sm_90a", name=ab.KERNEL.name, options=cfg.options + options)
    x = [np.zeros((1, 1, n, d), np.uint16) for _ in range(6)]
    acc = np.zeros((1, 1, n, d), np.float32)
    maps = [emulate.tensor_map(a, (64, d), dtype="bfloat16") for a in x]
    maps.append(emulate.tensor_map(acc, (64, cfg.dq_cols), dtype="float32"))
    lse, delta = np.zeros((1, 1, n), np.float32), np.zeros((1, 1, n), np.float32)
    mod["flash_bwd"](ab.main_grid(1, 1, n, cfg), (cfg.threads,),
                     (*maps, lse, delta, acc, 1, n, np.float32(0.125), 0), shared_mem=cfg.shared_bytes)


@pytest.mark.parametrize("case", list(UNEQUAL))
def test_unequal_consumer_steps_are_named_in_debug_builds(case: str, capfd: pytest.CaptureFixture[str]) -> None:
    from tklab.emulate.errors import EmulationError

    d, options, kernel, old, new, message = UNEQUAL[case]
    cfg = ab.build(d, **options)
    src = ab.source(cfg)
    if kernel == "chapter":  # the chapter's own flash_bwd (d = 128 builds the variant by default)
        assert not cfg.variant
    assert src.count(old) == 1, f"the planted split no longer applies: {old!r}"
    _launch_main(src, cfg, ("-DTK_DEBUG_TURNS",))  # as shipped, with the check: runs through
    capfd.readouterr()
    with pytest.raises(EmulationError) as err:
        _launch_main(src.replace(old, new), cfg, ("-DTK_DEBUG_TURNS",))
    assert err.value.report.get("kind") == "trap", err.value
    printed = capfd.readouterr().out
    assert re.search(message, printed), printed
    # without the check the same mistake is a hang (the emulator's deadlock, or a wait past its time)
    with pytest.raises(EmulationError) as err:
        _launch_main(src.replace(old, new), cfg, ())
    assert err.value.report.get("kind") != "trap", err.value


# ---- chapter 10's forward: its barrier ranges and its ping-pong turns ------------------------------------
def test_ch10_overlapping_barrier_ranges_stop_the_build() -> None:
    from tklab.kernels import attention

    b = attention.build("hopper", 128)  # ping-pong, 2 consumers: turns on 1, 2
    old = "epilogue_barriers = 8;"
    assert b.text().count(old) == 1
    planted = b.text().replace(old, "epilogue_barriers = 2;")
    with pytest.raises(CompileError, match="turn_ids and epilogue_ids"):
        tklab.compile(planted, arch="sm_90a", name=b.source.name, options=b.options)


def _launch_fwd(text: str, options: tuple[str, ...], n: int = 352) -> None:
    """chapter 10's forward alone on the emulator at d = 128 (ping-pong; B = H = 1, n = 352: 2 key blocks)."""
    from tklab import emulate
    from tklab.kernels import attention

    b = attention.build("hopper", 128)
    mod = emulate.compile(text, arch="sm_90a", name=b.source.name, options=b.options + options)
    bc = b.option("BC")
    x = [np.zeros((1, 1, n, 128), np.uint16) for _ in range(4)]
    maps = [emulate.tensor_map(a, (rows, 128), dtype="bfloat16") for a, rows in zip(x, (64, bc, bc, 64), strict=True)]
    lse = np.zeros((1, 1, n), np.float32)
    mod["flash_fwd"](attention.launch_grid(b, 1, 1, n), (b.threads,), (*maps, lse, 1, n, np.float32(0.125), 0),
                     shared_mem=b.shared_bytes)


def test_ch10_unequal_turns_are_named_in_debug_builds(capfd: pytest.CaptureFixture[str]) -> None:
    from tklab.emulate.errors import EmulationError
    from tklab.kernels import attention

    text = attention.build("hopper", 128).text()
    old = ": (seq + BC - 1) / BC;\n"  # the block's key blocks: consumer 1 (threads 256..383) walks one fewer
    assert text.count(old) == 1
    planted = text.replace(old, ": (seq + BC - 1) / BC - (threadIdx.x >= 256);  // PLANTED\n")
    _launch_fwd(text, ("-DTK_DEBUG_TURNS",))  # as shipped: runs through
    capfd.readouterr()
    with pytest.raises(EmulationError) as err:
        _launch_fwd(planted, ("-DTK_DEBUG_TURNS",))
    assert err.value.report.get("kind") == "trap", err.value
    printed = capfd.readouterr().out
    assert "turns<1, 2>: consumer group 1 walks 1 steps, group 0 walks 2" in printed, printed
    with pytest.raises(EmulationError) as err:  # without the check: a hang on the turn barriers
        _launch_fwd(planted, ())
    assert err.value.report.get("kind") != "trap", err.value
