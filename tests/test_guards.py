"""Guards on every configuration (issue 27, items 4 and 5), on this CPU: what the launchers and the library
accept compiles, fits, does not spill and cannot hang; everything else is refused with a message.

Compiles are few and shared (NVRTC costs seconds each): one tiny kernel per register split, one spilling
build, one failed compile of a kernel without its options; the masked-row tests run the chapters' kernels
on the CPU emulator with one extra mask line planted.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import tklab
from tklab.kernels import attention, gemm
from tklab.paths import solution
from tklab.run.arrays import bf16_to_float32, to_bf16_bits
from tklab.run.limits import (
    REGISTER_FILE,
    SHARED_OPTIN,
    ConfigError,
    check_compiled,
    launch_pool,
    launch_registers,
    shared_limit,
)
from tklab.toolchain.compiler import CompileError

SPLIT = """\
#include "tk.cuh"
using namespace tk;
using split = warpgroup::register_split<SPLIT_P, SPLIT_C, 2>;
extern "C" __device__ int pool = split::pool;
extern "C" __device__ int threads = split::threads;
extern "C" __device__ int launch_regs = warpgroup::launch_registers<split::threads>;
extern "C" __device__ int regs_at_128 = warpgroup::launch_registers<128>;
extern "C" __device__ int regs_at_320 = warpgroup::launch_registers<320>;
extern "C" __device__ int regs_at_640 = warpgroup::launch_registers<640>;
extern "C" __device__ int regs_at_1024 = warpgroup::launch_registers<1024>;
extern "C" __global__ void __launch_bounds__(split::threads, 1) k(int* out) {
    if (warpgroup::groupid() == 0) split::producer(); else split::consumer();
    out[threadIdx.x] = threadIdx.x;
}
"""


# ---- the register split: the block's pool, not the register file ------------------------------------
def test_register_split_checks_the_blocks_launch_pool():
    ok = tklab.compile(SPLIT, arch="sm_90a", name="split_ok.cu", options=("-DSPLIT_P=24", "-DSPLIT_C=240"))
    threads = ok.constants["threads"]
    assert threads == 3 * 128  # one producer and two consumer warpgroups
    # the library's rule and tklab.run.limits' are one rule: the pool the chapters quote comes from the latter
    assert ok.constants["launch_regs"] == launch_registers(threads)
    assert ok.constants["pool"] == launch_pool(threads) < REGISTER_FILE  # 384 threads leave part of the file unused
    assert ok.registers == launch_registers(threads)  # ptxas gives the launch-bounds cap at entry: setmaxnreg's pool
    # 32 + 2 x 240 = 512 registers x 128 threads: the whole register file, more than the block's pool
    assert (32 + 2 * 240) * 128 == REGISTER_FILE
    with pytest.raises(CompileError, match=rf"more registers than the block owns.*{launch_pool(threads):,}"):
        tklab.compile(SPLIT, arch="sm_90a", name="split_bad.cu", options=("-DSPLIT_P=32", "-DSPLIT_C=240"))
    for n in (128, 320, 640, 1024):  # the two rules agree where the cap or the unit decides too
        assert ok.constants[f"regs_at_{n}"] == launch_registers(n), n


# ---- attention.build: refused before compiling -----------------------------------------------------
@pytest.mark.parametrize("options,message", [
    ({"CONSUMERS": 1, "SCHEDULE": 1}, r"needs at least 2 of them \(CONSUMERS >= 2\)"),
    ({"CONSUMERS": 1, "SCHEDULE": 2}, "ping-pong"),
    ({"BC": 208}, rf"247,808 B of shared memory per block, more than the {SHARED_OPTIN[90]:,} B"),
    ({"STAGES": 3}, "shared memory per block"),
    ({"SCHEDULE": 3}, "SCHEDULE 0, 1 or 2"),
    ({"BC": 0}, "BC a multiple of 16 from 16"),
])
def test_build_refuses_configurations_that_cannot_compile_fit_or_finish(options, message, monkeypatch):
    monkeypatch.setattr(tklab.gpu, "available", lambda: False)  # the table's limit, as on a CPU machine
    with pytest.raises(ConfigError, match=message):
        attention.build("hopper", 128, **options)


def test_every_default_configuration_fits_the_devices_shared_memory(monkeypatch):
    monkeypatch.setattr(tklab.gpu, "available", lambda: False)
    assert shared_limit("sm_90a") == SHARED_OPTIN[90] and shared_limit(None) == SHARED_OPTIN[80]
    for kernel, per_d in attention.DEFAULTS.items():
        for d in per_d:
            b = attention.build(kernel, d)  # (itself refuses more than the limit)
            limit = SHARED_OPTIN[90] if b.arch == "sm_90a" else SHARED_OPTIN[80]
            assert b.shared_bytes <= limit, (kernel, d, b.shared_bytes)


def test_a_spilling_build_is_refused_from_its_compiled_module():
    b = attention.build("hopper", 64, CONSUMERS=3, BC=144)  # fits shared memory; 160 registers do not hold it
    with pytest.raises(ConfigError, match=r"spills: ptxas moved \d+ B of registers"):
        attention.compiled(b, "sm_90a")


def test_check_compiled_refuses_spills_shared_memory_and_registers():
    class K:
        spill_bytes = stack_bytes = shared_bytes = 0
        registers = 168

    check_compiled(K(), what="ok", dynamic_shared=200_000, threads=384, arch="sm_90a")
    with pytest.raises(ConfigError, match="shared memory"):
        check_compiled(K(), what="big", dynamic_shared=SHARED_OPTIN[90] + 1, threads=384, arch="sm_90a")
    with pytest.raises(ConfigError, match="registers of an SM"):
        check_compiled(K(), what="many", dynamic_shared=0, threads=512, arch="sm_90a")
    K.spill_bytes = 8
    with pytest.raises(ConfigError, match="spills"):
        check_compiled(K(), what="spill", dynamic_shared=0, threads=128, arch="sm_90a")


def test_a_gemm_step_with_too_many_stages_is_refused(monkeypatch):
    monkeypatch.setattr(tklab.gpu, "available", lambda: False)
    step = gemm.STEPS["4_l2_order"].with_options("-DSTAGES=6", name="4_l2_order 6 stages")
    with pytest.raises(ConfigError, match=r"GEMM step '4_l2_order 6 stages'.*shared memory per block"):
        gemm.compiled(step)


# ---- one value per constant ---------------------------------------------------------------------------
def test_the_kernels_hold_no_second_value_of_their_options():
    """The launcher's DEFAULTS are the only values: a compile without them stops with a message saying where
    they come from (no `#define BC 128` that a direct compile would silently use)."""
    for name in attention.KERNELS.values():
        src = solution(name).read_text()
        assert not re.search(r"#define\s+(BC|CONSUMERS|STAGES|SCHEDULE|WARP_ROWS)\s", src), name
    with pytest.raises(CompileError, match=r"compile through tklab\.attention\.build"):
        tklab.compile(solution("ch10_flash.cu").read_text(), arch="sm_90a", name="bare.cu")


def test_the_widgets_offer_the_shipped_block_shapes():
    from tklab.widgets import attention_view

    rows, keys = attention_view.block_choices()
    for kernel, per_d in attention.DEFAULTS.items():
        for d in per_d:
            b = attention.build(kernel, d)
            assert b.block_rows in rows and b.option("BC") in keys, (kernel, d)


# ---- scale ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scale", [0.0, -0.125, math.nan, math.inf])
def test_a_scale_that_is_not_positive_is_refused(scale):
    x = np.zeros((1, 1, 64, 64), np.uint16)
    with pytest.raises(ValueError, match="scale must be a positive finite number"):
        attention.flash_fwd(x, x, x, scale=scale)


# ---- rows every key of which is masked: O = 0, LSE = -inf (CPU emulator) -----------------------------------
emu = pytest.importorskip("tklab.emulate")
#: Planted after the kernel's own masks: row 3 loses every key; row 5 loses the first block's keys, so its
#: running max is still -inf when the first block ends (the rescale's guard), then finite.
PLANT = "mask_if(s, row0, col0, [](int r, int c) { return r == 3 || (r == 5 && c < BC); }, neg_inf);"


def _masked_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, bc: int) -> tuple[np.ndarray, np.ndarray]:
    q, k, v = (bf16_to_float32(x).astype(np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    s[..., 3, :] = -np.inf
    s[..., 5, :bc] = -np.inf
    m = s.max(-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0))
    l_sum = p.sum(-1, keepdims=True)
    o = np.where(l_sum > 0, p @ v / np.where(l_sum > 0, l_sum, 1), 0.0)
    with np.errstate(divide="ignore"):
        return o, (np.where(np.isfinite(m), m, -np.inf) + np.log(l_sum))[..., 0]


@pytest.mark.parametrize("kernel,d,n", [("tiles", 64, 150), ("hopper", 128, 200)])
def test_a_fully_masked_row_gives_zero_output_and_minus_infinity_lse(kernel, d, n):
    cfg = attention.build(kernel, d)
    bc = cfg.option("BC")
    src = cfg.source.read_text()
    anchor = re.findall(r"^.*mask_keys_from\(s, col0, seq\);.*$", src, re.M)
    assert len(anchor) == 1, anchor
    planted = src.replace(anchor[0], anchor[0] + "\n" + " " * 8 + PLANT)
    rng = np.random.default_rng(11)
    b, h = 1, 1
    q, k, v = (to_bf16_bits(rng.standard_normal((b, h, n, d)).astype(np.float32)) for _ in range(3))
    o, lse = np.full((b, h, n, d), 0xFFFF, np.uint16), np.full((b, h, n), np.nan, np.float32)
    mod = emu.compile(planted, name=cfg.source.name, options=cfg.options)
    scale = np.float32(1 / np.sqrt(d))
    if kernel == "tiles":
        args = (q, k, v, o, lse, h, n, h * n * d, n * d, d, scale, 0)
    else:
        maps = [emu.tensor_map(x, (rows, d), dtype="bfloat16") for x, rows in ((q, 64), (k, bc), (v, bc), (o, 64))]
        args = (*maps, lse, h, n, scale, 0)
    grid = ((n + cfg.block_rows - 1) // cfg.block_rows, h, b)
    mod["flash_fwd"](grid, (cfg.threads,), args, shared_mem=cfg.shared_bytes)
    out = bf16_to_float32(o)
    ref_o, ref_lse = _masked_reference(q, k, v, bc)
    assert not np.isnan(out).any() and not np.isnan(lse).any()
    assert (out[..., 3, :] == 0).all() and np.isneginf(lse[..., 3]).all()  # as FlashAttention gives
    np.testing.assert_allclose(out, ref_o, atol=2e-2, rtol=2e-2)  # row 5 (first block masked) and the rest
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse[finite], ref_lse[finite], atol=1e-3)


def test_what_the_refusal_recommends_runs_one_consumer_plain_schedule_one_stage():
    """The way out the SCHEDULE message gives (one consumer: SCHEDULE=0), at the smallest ring (STAGES=1): it
    compiles without spills and runs right on the emulator, which would report a deadlock."""
    cfg = attention.build("hopper", 64, CONSUMERS=1, SCHEDULE=0, STAGES=1, BC=64)
    assert attention.compiled(cfg, "sm_90a").spill_bytes == 0
    rng = np.random.default_rng(5)
    n, d = 150, 64
    q, k, v = (to_bf16_bits(rng.standard_normal((1, 1, n, d)).astype(np.float32)) for _ in range(3))
    o, lse = np.full((1, 1, n, d), 0xFFFF, np.uint16), np.full((1, 1, n), np.nan, np.float32)
    mod = emu.compile(cfg.source.read_text(), name=cfg.source.name, options=cfg.options)
    maps = [emu.tensor_map(x, (rows, d), dtype="bfloat16") for x, rows in ((q, 64), (k, 64), (v, 64), (o, 64))]
    grid = ((n + cfg.block_rows - 1) // cfg.block_rows, 1, 1)
    mod["flash_fwd"](grid, (cfg.threads,), (*maps, lse, 1, n, np.float32(1 / 8), 1), shared_mem=cfg.shared_bytes)
    ref_o, ref_lse = attention.naive(*(bf16_to_float32(x) for x in (q, k, v)), causal=True)
    np.testing.assert_allclose(bf16_to_float32(o), ref_o, atol=2e-2, rtol=2e-2)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3)
