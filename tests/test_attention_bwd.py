"""Chapter 11's attention backward: the float64 reference, the Hopper kernel under CPU emulation on awkward
shapes, planted mistakes of the builds the exercise does not use (the exercise's own suite is
solutions/ch11_flash_bwd/planted.toml), and (GPU) the kernel against float64 torch autograd.

Emulated runs share one compiled module per head dimension (module-scoped): an emulator compile costs
~10 s of CPU, a run on these shapes 1-3 s.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from tklab.kernels import attention, attention_bwd
from tklab.run.arrays import bf16_to_float32, to_bf16_bits
from tklab.run.limits import SHARED_OPTIN

SRC = attention_bwd.KERNEL.read_text()  # the chapter's kernel: FlashAttention-3's layout
ROWS_SRC = attention_bwd.ROWS_FILE.read_text()  # SWAPAB=0: the queries as rows


# ---- the reference -------------------------------------------------------------------------------------
def _loss(q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, causal: bool) -> float:
    return float((attention.naive(q, k, v, causal=causal)[0] * do).sum())


@pytest.mark.parametrize("causal", [False, True])
def test_reference_gradients_match_finite_differences(causal: bool) -> None:
    """reference() is the derivative of attention.naive: <dO, O> perturbed entry by entry (float64)."""
    rng = np.random.default_rng(0)
    q, k, v, do = (rng.standard_normal((1, 2, 5, 3)) for _ in range(4))
    g = attention_bwd.reference(q, k, v, do, causal=causal)
    eps = 1e-6
    for x, grad in ((q, g.dq), (k, g.dk), (v, g.dv)):
        num = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            old = x[idx]
            x[idx] = old + eps
            up = _loss(q, k, v, do, causal)
            x[idx] = old - eps
            down = _loss(q, k, v, do, causal)
            x[idx] = old
            num[idx] = (up - down) / (2 * eps)
        np.testing.assert_allclose(grad, num, atol=1e-7, rtol=1e-6)
    np.testing.assert_allclose(g.delta, (g.o * do).sum(-1))


def test_grad_errors_tells_right_from_wrong() -> None:
    ref = np.linspace(-2, 2, 64).reshape(8, 8)
    assert attention_bwd.grad_errors("dq", ref * (1 + 1e-3), ref).ok()
    off = ref.copy()
    off[3, 5] += 1.0
    e = attention_bwd.grad_errors("dq", off, ref)
    assert not e.ok() and e.wrong == 1 and e.first_wrong.startswith("dq[3, 5]")
    nan = ref.copy()
    nan[0, 0] = np.nan
    assert not attention_bwd.grad_errors("dq", nan, ref).ok()
    assert not attention_bwd.grad_errors("dq", ref * 1.03, ref).ok()  # 3 % everywhere: rel catches it


@pytest.mark.parametrize("causal", [False, True])
def test_the_benchmarks_blockwise_l_and_d_equal_the_exact_ones(causal: bool) -> None:
    """ch11's timed check gets L and D from a blockwise float32 pass (the exact float64 one needs the N x N
    matrices: a minute per input set at the benchmark size); both must give the kernel the same inputs."""
    from tklab import specs

    spec = specs.module("ch11_flash_bwd")

    rng = np.random.default_rng(3)
    q, k, v, do = (bf16_to_float32(to_bf16_bits(rng.standard_normal((1, 2, 300, 128)).astype(np.float32)))
                   for _ in range(4))
    o, lse = attention.naive(q, k, v, causal=causal)
    o16 = bf16_to_float32(to_bf16_bits(o.astype(np.float32))).astype(np.float64)
    got_l, got_d = spec.forward_stats(q, k, v, do, causal, rows=128)
    np.testing.assert_allclose(got_l, lse, rtol=0, atol=2e-5)
    assert np.abs(got_d - (o16 * do).sum(-1)).max() < 2e-2  # bf16 rounding of O may flip a last bit
    exact = spec.inputs(np.random.default_rng(5), {"B": 1, "H": 2, "N": 300, "causal": int(causal)})
    big = spec.EXACT_LIMIT
    try:
        spec.EXACT_LIMIT = 0  # the same inputs through the blockwise path
        fast = spec.inputs(np.random.default_rng(5), {"B": 1, "H": 2, "N": 300, "causal": int(causal)})
    finally:
        spec.EXACT_LIMIT = big
    assert all(np.array_equal(exact[n], fast[n]) for n in ("Q", "K", "V", "DO"))
    np.testing.assert_allclose(fast["LSE"], exact["LSE"], atol=2e-5)
    np.testing.assert_allclose(fast["DELTA"], exact["DELTA"], atol=2e-2)


def test_dq_slots_cover_every_key_block_and_query_row() -> None:
    """DQ_MODE 2's accumulator: one slot per key block (per consumer without the column split), each of
    whole query blocks; the last pass sums the slots of the key blocks the block map does not skip."""
    split, plain, one = attention_bwd.build(128, DQ_MODE=2), attention_bwd.build(64, DQ_MODE=2), \
        attention_bwd.build(64, DQ_MODE=2, CONSUMERS=1)
    assert (split.dq_slots(1000), plain.dq_slots(1000), one.dq_slots(1000)) == (8, 16, 16)
    assert split.q_rows(1000) == 1024 and split.q_rows(64) == 64
    assert split.shared_bytes == attention_bwd.build(128, DQ_MODE=1, PINGPONG=0).shared_bytes
    with pytest.raises(ValueError, match="DQ_MODE 0, 1 or 2"):
        attention_bwd.build(128, DQ_MODE=3)


def test_build_options_and_shared_memory_model() -> None:
    cfg = attention_bwd.build(128)
    consumers = attention_bwd.DEFAULTS[128]["CONSUMERS"]  # a producer warpgroup beside them, 64 keys each
    assert (cfg.consumers, cfg.threads, cfg.kv_block) == (consumers, 128 * (consumers + 1), 64 * consumers)
    assert cfg.shared_bytes <= SHARED_OPTIN[90]
    with pytest.raises(ValueError, match="head dimension 64 or 128"):
        attention_bwd.build(96)
    with pytest.raises(ValueError, match="unknown option"):
        attention_bwd.build(64, BC=64)
    assert attention_bwd.flops(1, 1, 128, 64) == 2.5 * attention.flops(1, 1, 128, 64)


BUILDS = [(64, {"CONSUMERS": 1, "DQ_MODE": 0}), (64, {}), (64, {"SWAPAB": 0}),
          (128, {"DQ_MODE": 0}), (128, {}), (128, {"PINGPONG": 0}),
          (64, {"STAGES": 3}), (64, {"UNIFORM": 1}), (128, {"UNIFORM": 0}), (128, {"DQ_MODE": 2}), (64, {"DQ_MODE": 2}),
          (128, {"DQ_LAG": 1}), (128, {"PINGPONG": 1}), (64, {"PINGPONG": 1}), (64, {"SWAPAB": 1}),
          (64, {"SWAPAB": 1, "UNIFORM": 1}), (128, {"SWAPAB": 1}), (128, {"SWAPAB": 1, "UNIFORM": 0}),
          (64, {"SWAPAB": 1, "DQ_WRITER": 0}), (128, {"SWAPAB": 1, "QSTEP": 80})]


@pytest.mark.parametrize("d,options", BUILDS, ids=[f"d{d}-{o}" for d, o in BUILDS])
def test_shared_memory_model_equals_the_kernels_export(d: int, options: dict[str, int]) -> None:
    """The emulator launch uses the Python model; the GPU launch the kernel's own number: they agree.
    And ptxas serializes no build's wgmma (C75xx warnings) and spills nothing -- the default TMA-reduce
    build at d = 128 included (it spilled 40 B while q_first was live across setmaxnreg)."""
    import tklab

    cfg = attention_bwd.build(d, **options)
    mod = tklab.compile(attention_bwd.source(cfg), arch="sm_90a", name=attention_bwd.KERNEL.name, options=cfg.options)
    assert mod.constants["flash_bwd_shared_bytes"] == cfg.shared_bytes
    assert mod.constants["flash_bwd_kv_block"] == cfg.kv_block
    assert not [ln for ln in mod.log.splitlines() if "C75" in ln]
    assert mod["flash_bwd"].spill_bytes == 0


def test_uniform_is_the_kernels_default_at_d128_and_leaves_no_r2ur_in_the_loop() -> None:
    """UNIFORM (the consumer index from a shuffle) defaults in the kernel: on at d = 128, off at d = 64 (as
    measured), so a default build's options do not name it. With it the main loop has no R2UR (ordinary ->
    uniform register moves) and is shorter: without it the d = 128 loop moves its wgmma descriptors into uniform
    registers before each wgmma."""
    import tklab
    from tklab.toolchain.sass import main_loop

    for d in (64, 128):
        assert not [f for f in attention_bwd.build(d).options if "UNIFORM" in f]
    assert attention_bwd.build(128, UNIFORM=1).options == attention_bwd.build(128).options
    assert "-DUNIFORM=0" in attention_bwd.build(128, UNIFORM=0).options
    assert "-DUNIFORM=1" in attention_bwd.build(64, UNIFORM=1).options
    with pytest.raises(ValueError, match="UNIFORM must be 0 or 1"):
        attention_bwd.build(128, UNIFORM=2)
    loops = [main_loop(tklab.compile(attention_bwd.source(cfg), arch="sm_90a", name=attention_bwd.KERNEL.name,
                                     options=cfg.options)["flash_bwd"].sass)
             for cfg in (attention_bwd.build(128, SWAPAB=1, UNIFORM=0), attention_bwd.build(128))]
    assert [op for op in loops[0] if op.startswith("R2UR")]
    assert "HGMMA" in " ".join(loops[1]) and not [op for op in loops[1] if op.startswith("R2UR")]
    assert len(loops[1]) < len(loops[0])


# ---- the kernel on the CPU emulator -------------------------------------------------------------------
emu = pytest.importorskip("tklab.emulate")


def _inputs(d: int, n: int, *, heads: int = 1, q_mult: float = 1.0, seed: int = 0,
            batch: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (batch, heads, n, d)
    x = {"q": to_bf16_bits((q_mult * rng.standard_normal(shape)).astype(np.float32))}
    x |= {name: to_bf16_bits(rng.standard_normal(shape).astype(np.float32)) for name in ("k", "v", "do")}
    return x


def _run_emulated(src: str, d: int, x: dict[str, np.ndarray], causal: bool, *, launches: list[Any] | None = None,
                  **options: int) -> list[Any]:
    """The three kernels of ``src`` on the emulator; returns the gradient errors against float64 (and
    appends flash_bwd's LaunchResult to ``launches`` if given)."""
    f = {name: bf16_to_float32(a).astype(np.float64) for name, a in x.items()}
    ref = attention_bwd.reference(f["q"], f["k"], f["v"], f["do"], causal=causal)
    o, lse = to_bf16_bits(ref.o.astype(np.float32)), ref.lse.astype(np.float32)
    cfg = attention_bwd.build(d, **options)
    mod = _module(attention_bwd.source(cfg) if src is SRC else src, cfg)  # SRC: the build's own source
    b, h, n, _ = x["q"].shape
    grads = [np.full((b, h, n, d), 0xFFFF, np.uint16) for _ in range(3)]
    # NaN until written: with DQ_MODE 2 a slot the last pass reads but no key block wrote would show (DQ_FRAGMENTS:
    # whole steps, each step's two parts in register order)
    # SWAPAB: the first pass lays out L and D per 128-query step (padding included), read by one TMA box a step
    delta = np.full(attention_bwd.stats_shape(b, h, n, cfg) if cfg.swapab else (b, h, n), np.nan, np.float32)
    acc = np.full(attention_bwd.dq_scratch_shape(b, h, n, cfg), np.nan, np.float32)
    sc = np.float32(1 / math.sqrt(d))
    maps = [emu.tensor_map(a, (cfg.step_box_rows if name in ("q", "do") else 64, d), dtype="bfloat16")
            for name, a in (("q", x["q"]), ("k", x["k"]), ("v", x["v"]), ("do", x["do"]), ("dk", grads[1]),
                            ("dv", grads[2]))]
    if cfg.dq_fragments:  # rows of 64 floats, one unswizzled box per part
        maps.append(emu.tensor_map(acc.reshape(b, h, -1, 64), (cfg.dq_box_rows, 64), dtype="float32", swizzle=0))
    else:
        maps.append(emu.tensor_map(acc, (cfg.dq_box_rows, cfg.dq_cols), dtype="float32"))
    strides = (h * n * d, n * d, d, h * n * d, n * d, d)
    if cfg.swapab:
        stats_map = emu.tensor_map(delta, (attention_bwd.STATS_ROWS, attention_bwd.stats_cols(cfg)), dtype="float32",
                                   swizzle=0)
        mod["flash_bwd_prep"]((-(-attention_bwd.prep_rows(n, cfg) // 4), h, b), (128,),
                              (o, x["do"], lse, delta, acc, h, n, *strides))
        args: tuple[Any, ...] = (*maps, stats_map, h, n, sc, int(causal))
    else:
        mod["flash_bwd_prep"]((-(-n // 4), h, b), (128,), (o, x["do"], delta, acc, h, n, *strides))
        args = (*maps, lse, delta, acc, h, n, sc, int(causal))
    res = mod["flash_bwd"](attention_bwd.main_grid(b, h, n, cfg), (cfg.threads,), args, shared_mem=cfg.shared_bytes)
    if launches is not None:
        launches.append(res)
    mod["flash_bwd_dq"](attention_bwd._grids(b, h, n, cfg)["dq"], (128 if cfg.dq_fragments else 256,),
                        (acc, grads[0], h, n, h * n * d, n * d, d, sc, int(causal)))
    return [attention_bwd.grad_errors(name, bf16_to_float32(g), want)
            for name, g, want in zip(("dq", "dk", "dv"), grads, (ref.dq, ref.dk, ref.dv), strict=True)]


_MODULES: dict[tuple[str, tuple[str, ...]], Any] = {}


def _module(src: str, cfg: attention_bwd.BwdBuild) -> Any:
    key = (src, cfg.options)
    if key not in _MODULES:
        _MODULES[key] = emu.compile(src, arch="sm_90a", name=attention_bwd.source_name(cfg), options=cfg.options)
    return _MODULES[key]


@pytest.fixture(scope="module", autouse=True)
def _drop_modules() -> Any:
    yield
    _MODULES.clear()


# (d, n, heads, causal, q multiplier): lengths 1, 77, 128 and causal tails; large logits (|scale S| ~ 40)
CASES = [(64, 1, 1, False, 1.0), (64, 77, 2, True, 1.0), (64, 200, 1, True, 8.0),
         (128, 128, 1, False, 1.0), (128, 130, 1, True, 1.0), (128, 77, 1, False, 8.0)]


@pytest.mark.parametrize("d,n,heads,causal,mult", CASES)
def test_backward_under_emulation_matches_float64(d: int, n: int, heads: int, causal: bool, mult: float) -> None:
    errs = _run_emulated(SRC, d, _inputs(d, n, heads=heads, q_mult=mult), causal)
    assert all(e.ok() for e in errs), "; ".join(map(str, errs))


@pytest.mark.parametrize("d,n,causal,options", [(64, 77, True, {"CONSUMERS": 1}),
                                                  (128, 200, True, {"DQ_MODE": 1, "PINGPONG": 0}),
                                                  (64, 130, False, {"DQ_MODE": 1, "SWAPAB": 0}),
                                                  (128, 130, True, {"UNIFORM": 0}),
                                                  (64, 200, True, {"DQ_MODE": 2}),
                                                  (128, 130, False, {"DQ_MODE": 2}),
                                                  (64, 77, False, {"DQ_MODE": 2, "CONSUMERS": 1})])
def test_variants_match_float64(d: int, n: int, causal: bool, options: dict[str, int]) -> None:
    """One consumer warpgroup (no dQ split, no setmaxnreg), dQ added by TMA reduce-add (split and not: the
    chapter's kernel, PINGPONG=0 at d = 128 and SWAPAB=0 at d = 64, as the default builds are FA3's layout), and
    at d = 128 the consumer index without the shuffle (UNIFORM=0, which also names the chapter's kernel there)."""
    errs = _run_emulated(SRC, d, _inputs(d, n), causal, **options)
    assert all(e.ok() for e in errs), "; ".join(map(str, errs))


# DQ_LAG (d = 128): dQ one step late, dS handed between the consumers through two buffers and mbarriers.
LAG_SRC = attention_bwd.source(attention_bwd.build(128, DQ_LAG=1))


LAG_CASES = [(128, 200, True, {"DQ_LAG": 1}), (128, 130, False, {"DQ_LAG": 1}), (128, 1, False, {"DQ_LAG": 1}),
             (128, 200, True, {"PINGPONG": 1}), (128, 77, True, {"PINGPONG": 1}), (64, 200, True, {"PINGPONG": 1}),
             (64, 130, False, {"PINGPONG": 1})]


@pytest.mark.parametrize("d,n,causal,options", LAG_CASES)
def test_lagged_dq_and_ping_pong_match_float64(d: int, n: int, causal: bool, options: dict[str, int]) -> None:
    """A block of one step (n = 1: only the throwaway dQ and the last one), partial key blocks, causal
    tails; the consumers taking turns at d = 128 (with the lag) and d = 64 (without)."""
    cfg = attention_bwd.build(d, **options)
    errs = _run_emulated(attention_bwd.source(cfg), d, _inputs(d, n), causal, **options)
    assert all(e.ok() for e in errs), "; ".join(map(str, errs))


def test_dq_lag_and_ping_pong_are_refused_where_they_do_not_apply() -> None:
    assert "-DDQ_LAG=1" in attention_bwd.build(128, PINGPONG=1).options  # the split dQ needs the lag
    # the turns are what d = 128 gets without FA3's layout (SWAPAB=0: the default before it), never at d = 64 or for
    # other modes; the default builds at both head dimensions are FA3's layout, without turns
    assert attention_bwd.build(128, SWAPAB=0).options == attention_bwd.build(128, PINGPONG=1).options
    assert attention_bwd.build(128, SWAPAB=0).variant and not attention_bwd.build(128, PINGPONG=0).variant
    assert not any(attention_bwd.build(d, **o).variant for d, o in [(64, {}), (128, {}), (64, {"SWAPAB": 0}),
                                                                     (128, {"DQ_MODE": 0}), (128, {"UNIFORM": 0}),
                                                                     (128, {"DQ_MODE": 2})])
    for d, opts in [(64, {"DQ_LAG": 1}), (128, {"DQ_LAG": 1, "DQ_MODE": 0}), (128, {"DQ_LAG": 1, "DQ_MODE": 2}),
                    (64, {"PINGPONG": 1, "CONSUMERS": 1})]:
        with pytest.raises(ValueError, match="DQ_LAG=1 .* and PINGPONG=1"):
            attention_bwd.build(d, **opts)
    with pytest.raises(ValueError, match="must be 0 or 1"):
        attention_bwd.build(128, DQ_LAG=2)


# SWAPAB: S^T = K Q^T and dP^T = V dO^T, P^T and dS^T the register A operand of dV and dK, 128-query steps at
# d = 64 (64 at d = 128), L and D by TMA. Ragged lengths, one query (a step of padded queries), several heads,
# causal or not (n = 300: three key blocks, causal diagonals in each), large logits.
SWAPAB_SRC = attention_bwd.source(attention_bwd.build(64, SWAPAB=1))
# Without the dQ writer warp (DQ_WRITER=0): each consumer sends its own quarter. QSTEP=80 (d = 128): dQ^T's rows
# stored transposed; 80-query steps that do not divide a key block (causal: the diagonal crosses two steps).
SWAPAB_CASES = [(64, 1, 1, False, 1.0, {}), (64, 77, 2, True, 1.0, {}), (64, 200, 1, True, 8.0, {}),
                (64, 300, 1, True, 1.0, {}), (64, 260, 2, False, 1.0, {}), (128, 1, 1, True, 1.0, {}),
                (128, 130, 1, True, 1.0, {}), (128, 200, 1, False, 8.0, {}), (64, 300, 1, True, 1.0, {"DQ_WRITER": 0}),
                (128, 200, 1, True, 1.0, {"DQ_WRITER": 0}), (128, 1, 1, False, 1.0, {"QSTEP": 80}),
                (128, 200, 1, False, 1.0, {"QSTEP": 80}), (128, 161, 2, True, 8.0, {"QSTEP": 80})]


@pytest.mark.parametrize("d,n,heads,causal,mult,extra", SWAPAB_CASES)
def test_swapab_matches_float64(d: int, n: int, heads: int, causal: bool, mult: float, extra: dict[str, int]) -> None:
    options = {"SWAPAB": 1} | extra
    src = attention_bwd.source(attention_bwd.build(d, **options))
    errs = _run_emulated(src, d, _inputs(d, n, heads=heads, q_mult=mult), causal, **options)
    assert all(e.ok() for e in errs), "; ".join(map(str, errs))


def test_swapab_through_the_python_launch_and_uniform() -> None:
    """attention_bwd.flash_bwd's own launch (its prep and main arguments differ from the chapter's), with the
    consumer index from a shuffle (UNIFORM=1), on two batches."""
    x = _inputs(64, 150, heads=2, seed=4, batch=2)
    f = {name: bf16_to_float32(a).astype(np.float64) for name, a in x.items()}
    ref = attention_bwd.reference(f["q"], f["k"], f["v"], f["do"], causal=True)
    o, lse = to_bf16_bits(ref.o.astype(np.float32)), ref.lse.astype(np.float32)
    grads = attention_bwd.flash_bwd(x["q"], x["k"], x["v"], o, lse, x["do"], causal=True, SWAPAB=1, UNIFORM=1)
    for name, got, want in zip(("dq", "dk", "dv"), grads, (ref.dq, ref.dk, ref.dv), strict=True):
        e = attention_bwd.grad_errors(name, bf16_to_float32(got), want)
        assert e.ok(), str(e)


SWAPAB_ONLY = "DQ_WRITER, QSTEP, DQ_UNDER_DK, DQ_FRAGMENTS, STATS_EARLY are options of SWAPAB=1"


def test_swapab_is_refused_where_it_does_not_apply() -> None:
    # the default at both head dimensions (measured faster than the chapter's kernel and its turns); SWAPAB=0, or
    # an option only the chapter's kernel has, builds the chapter's kernel
    assert attention_bwd.build(64).swapab and attention_bwd.build(128).swapab
    assert "-DSWAPAB=1" in attention_bwd.build(64, SWAPAB=1).options
    assert attention_bwd.build(64).options == attention_bwd.build(64, SWAPAB=1).options
    assert attention_bwd.build(128).options == attention_bwd.build(128, SWAPAB=1).options
    assert not any(attention_bwd.build(d, **o).swapab for d, o in [
        (64, {"SWAPAB": 0}), (128, {"PINGPONG": 0}), (64, {"DQ_MODE": 0}), (64, {"DQ_MODE": 2}),
        (64, {"CONSUMERS": 1}), (64, {"STAGES": 3}), (128, {"UNIFORM": 0}), (64, {"PINGPONG": 1})])
    assert attention_bwd.build(64, SWAPAB=1, DQ_WRITER=1).options == attention_bwd.build(64, SWAPAB=1).options
    with pytest.raises(ValueError, match=SWAPAB_ONLY):
        attention_bwd.build(64, SWAPAB=0, DQ_WRITER=0)
    with pytest.raises(ValueError, match=SWAPAB_ONLY):
        attention_bwd.build(128, PINGPONG=0, QSTEP=80)
    with pytest.raises(ValueError, match=SWAPAB_ONLY):
        attention_bwd.build(64, SWAPAB=0, DQ_UNDER_DK=0)
    for d, q in [(64, 80), (64, 64), (128, 96), (128, 128)]:
        with pytest.raises(ValueError, match="QSTEP .* is 128 at head dimension 64, 64 or 80 at 128"):
            attention_bwd.build(d, SWAPAB=1, QSTEP=q)
    assert attention_bwd.build(128, SWAPAB=1, QSTEP=80).qstep == 80
    assert attention_bwd.build(128, SWAPAB=1, QSTEP=64).options == attention_bwd.build(128, SWAPAB=1).options
    assert not attention_bwd.build(128, SWAPAB=1).variant  # d = 128's default turns do not come with it
    assert (attention_bwd.build(64, SWAPAB=1).qstep, attention_bwd.build(128, SWAPAB=1).qstep) == (128, 64)
    for d, opts in [(128, {"SWAPAB": 1, "PINGPONG": 1}), (64, {"SWAPAB": 1, "DQ_MODE": 0}),
                    (64, {"SWAPAB": 1, "CONSUMERS": 1}), (64, {"SWAPAB": 1, "PINGPONG": 1})]:
        with pytest.raises(ValueError, match="SWAPAB=1 is written for CONSUMERS=2"):
            attention_bwd.build(d, **opts)


@pytest.mark.parametrize("d", [64, 128])
def test_swapab_loop_reads_p_and_ds_from_registers(d: int) -> None:
    """In the SASS of the hot loop: dV and dK are wgmma with a register A operand (one per 16 queries of the
    step, each), and every other wgmma reads shared memory. d = 64: a 128-query step issues 32 wgmma (S^T and
    dP^T with N = 128) where the chapter's kernel issues 20 per 64 queries (40 per 128); d = 128: 32 per 64
    queries, as the chapter's kernel. No global load is left in the loop: L and D come from shared memory."""
    import tklab
    from tklab.toolchain.sass import loops, main_loop

    def hot(opts: dict[str, int]) -> tuple[list[str], list[str]]:
        cfg = attention_bwd.build(d, **opts)
        mod = tklab.compile(attention_bwd.source(cfg), arch="sm_90a", name=attention_bwd.KERNEL.name,
                            options=cfg.options)
        assert mod.constants.get("flash_bwd_qstep", 64) == cfg.qstep  # the Python model's steps are the kernel's
        sass = mod["flash_bwd"].sass
        ops = main_loop(sass)
        body = next(b for b in loops(sass) if [o for _, o, _ in b] == ops)
        return ops, [f"{o} {a}" for _, o, a in body if o.startswith("HGMMA")]

    qstep = attention_bwd.build(d, SWAPAB=1).qstep
    ops, hgmma = hot({"SWAPAB": 1})
    assert len(hgmma) == 32, hgmma
    assert len([g for g in hgmma if "gdesc" not in g.split(",")[1]]) == 2 * qstep // 16, hgmma  # A in registers
    if d == 64:
        assert len([g for g in hgmma if "x128x16" in g]) == 8, hgmma
    assert not [o for o in ops if o.startswith("LDG")]
    chapter_ops, chapter_hgmma = hot({"PINGPONG": 0})
    assert len(chapter_hgmma) == {64: 20, 128: 32}[d] and all("gdesc" in g.split(",")[1] for g in chapter_hgmma)


# The chapter kernel's typical mistakes outside the exercise's part (the step's own are in
# solutions/ch11_flash_bwd/planted.toml: the exercise's suite), on n = 300, causal (three key blocks, so dQ's sum over
# key blocks, both consumers' dS^T and the diagonal all matter): each is caught, as a race or hazard the emulator
# names or as wrong numbers.
SWAPAB_MISTAKES = [
    ("one dS^T buffer: overwritten while the other consumer's dQ may still read it", "buf ^= 1", "buf ^= 0", "hazard"),
    ("K overwritten by dK before the other consumer's last dQ read it", "    mul(dk, dk, scale);\n    both::sync();",
     "    mul(dk, dk, scale);", "hazard"),
    ("L left in natural-log units inside exp2", "lse[bh * seq + row] * LOG2E", "lse[bh * seq + row]", "wrong"),
    ("a dQ part written before the writer sent the last step's",
     "if constexpr (DQ_WRITER) wait(sm.dq_empty, (uint32_t(i - first) & 1) ^ 1);", "", "race|hazard"),
    ("the dQ buffer handed back before the copy engine read it",
     "        tma::store_wait_read<0>();\n        arrive(sm.dq_empty);", "        arrive(sm.dq_empty);", "hazard"),
    ("dQ announced per thread on a barrier counting warps",
     "arrive_warp(sm.dq_full);", "arrive(sm.dq_full);", "race|hazard|deadlock|hang"),
]


@pytest.mark.parametrize("what,old,new,caught", SWAPAB_MISTAKES, ids=[m[0] for m in SWAPAB_MISTAKES])
def test_swapab_planted_mistake_is_caught(what: str, old: str, new: str, caught: str) -> None:
    """"wrong": the gradients miss float64; else the emulator names the race or hazard."""
    assert SWAPAB_SRC.count(old) == 1, what
    src = SWAPAB_SRC.replace(old, new)
    if caught == "wrong":
        errs = _run_emulated(src, 64, _inputs(64, 300), True, SWAPAB=1)
        assert not all(e.ok() for e in errs), f"{what}: not caught ({'; '.join(map(str, errs))})"
    else:
        with pytest.raises(Exception, match=f"(?i){caught}"):
            _run_emulated(src, 64, _inputs(64, 300), True, SWAPAB=1)


# The hand-over options (solutions/variants/ch11_step_options.cu): DQ_UNDER_DK=1 (the chapter's order) issues dQ's
# part before dK and stores it for the writer while dK runs, DQ_UNDER_DK=0 (the order before) issues dK first and
# waits for every product before the store; DQ_FRAGMENTS=1 (the chapter kernel's own, its default at d = 128) parks
# it in register order (16-byte stores) into an accumulator the last pass reads back part by part.
# Right against float64 at both head dimensions, with 80-query steps,
# without the writer and with the turns (through the Python launch, its fp32 accumulator poisoned first: NaN
# where prep does not zero it); at the chapter's values, the file is the chapter's kernel to the instruction; else the
# SASS does what each option says.
STEP_SRC = attention_bwd.STEP_FILE.read_text()
AFTER, FRAGMENTS, BOTH = {"DQ_UNDER_DK": 0}, {"DQ_FRAGMENTS": 1}, {"DQ_UNDER_DK": 1, "DQ_FRAGMENTS": 1}
ALL3 = BOTH | {"STATS_EARLY": 1}
STEP_CASES = [(128, 200, 1, True, 1.0, ALL3), (64, 300, 2, True, 1.0, ALL3),
              (128, 161, 2, True, 8.0, ALL3 | {"QSTEP": 80}), (128, 200, 1, True, 1.0, AFTER),
              (64, 260, 1, False, 1.0, FRAGMENTS), (128, 130, 1, True, 8.0, {"STATS_EARLY": 1}),
              (64, 1, 1, False, 1.0, ALL3), (128, 130, 1, False, 1.0, BOTH | {"DQ_WRITER": 0}),
              (64, 260, 2, False, 8.0, AFTER | {"DQ_WRITER": 0}), (128, 77, 1, False, 1.0, FRAGMENTS | {"QSTEP": 80}),
              (128, 161, 1, True, 8.0, AFTER | {"QSTEP": 80}),
              (128, 200, 2, False, 1.0, ALL3 | {"QSTEP": 80, "DQ_WRITER": 0})]
STEP_CORE = {(128, 200, 1), (64, 300, 2), (128, 161, 2), (64, 260, 1), (128, 130, 1)}


def _emulated_backward(x: dict[str, np.ndarray], causal: bool, *, src: str | None = None, monkeypatch: Any = None,
                       workers: int = 1, poison: bool = True, time_limit: float | None = None,
                       **options: int) -> tuple[Any, list[Any], list[np.ndarray]]:
    """The backward through attention_bwd._Launches on the emulator (``src``: a planted kernel in place of the
    build's), flash_bwd on ``workers`` threads; ``poison``: its fp32 dQ accumulator NaN before the first pass. The
    launch, the gradient errors against float64 and the bf16 gradients (dq, dk, dv)."""
    if src is not None:
        monkeypatch.setattr(attention_bwd, "compiled", lambda b, target="gpu": _module(src, b))
    f = {name: bf16_to_float32(a).astype(np.float64) for name, a in x.items()}
    ref = attention_bwd.reference(f["q"], f["k"], f["v"], f["do"], causal=causal)
    o, lse = to_bf16_bits(ref.o.astype(np.float32)), ref.lse.astype(np.float32)
    grads = [np.full(x["q"].shape, 0xFFFF, np.uint16) for _ in range(3)]
    launch = attention_bwd._Launches(x["q"], x["k"], x["v"], o, lse, x["do"], *grads, causal=causal, scale=None,
                                     cpu=True, **options)
    if poison:
        launch.dq_acc[...] = np.nan  # as garbage on the GPU: prep must zero what flash_bwd adds into
    limit = {} if time_limit is None else {"time_limit": time_limit}
    for j, (kernel, grid, threads, args, smem) in enumerate(launch.steps):  # prep, flash_bwd, the last pass
        kernel(grid, threads, args, shared_mem=smem, workers=workers if j == 1 else 1, **limit)
    errs = [attention_bwd.grad_errors(name, bf16_to_float32(g), want)
            for name, g, want in zip(("dq", "dk", "dv"), grads, (ref.dq, ref.dk, ref.dv), strict=True)]
    return launch, errs, grads


def _launch_run(x: dict[str, np.ndarray], causal: bool, *, src: str | None = None, monkeypatch: Any = None,
                workers: int = 1, **options: int) -> tuple[Any, list[Any]]:
    """The backward on the emulator, its dQ accumulator poisoned first: the launch and the gradient errors."""
    launch, errs, _ = _emulated_backward(x, causal, src=src, monkeypatch=monkeypatch, workers=workers, **options)
    return launch, errs


@pytest.mark.parametrize("d,n,heads,causal,mult,options",
                         [pytest.param(*c, marks=() if c[:3] in STEP_CORE else pytest.mark.test_full)
                          for c in STEP_CASES])
def test_step_options_match_float64(d: int, n: int, heads: int, causal: bool, mult: float,
                                          options: dict[str, int]) -> None:
    cfg = attention_bwd.build(d, **options)
    # DQ_FRAGMENTS is the chapter kernel's own (its default at d = 128): alone it names the chapter's file
    assert attention_bwd.source(cfg) == (STEP_SRC if cfg.step_options else SRC)
    _, errs = _launch_run(_inputs(d, n, heads=heads, q_mult=mult, seed=n), causal, **options)
    assert all(e.ok() for e in errs), "; ".join(map(str, errs))


def test_step_options_with_the_turns_match_float64_and_the_same_bits_on_concurrent_blocks() -> None:
    """DETERMINISTIC with the step options: right, every step's turns taken once, and dQ the same bit for bit when
    the blocks run one after another and when they run concurrently."""
    x = _inputs(128, 300, heads=1, seed=300)
    first, _, dq = _deterministic_run(x, True, **ALL3)
    launch, errs, dq_again = _deterministic_run(x, True, workers=DET_WORKERS, **ALL3)
    assert all(e.ok() for e in errs), "; ".join(map(str, errs))
    cfg = attention_bwd.build(128, DETERMINISTIC=1, **ALL3)
    want = np.broadcast_to(np.array(_adders_per_step(300, True, cfg), np.int32),
                           attention_bwd.turns_shape(1, 1, 300, cfg))
    assert np.array_equal(launch.turns, want), (launch.turns, want)
    assert np.array_equal(first.dq_acc.view(np.uint32), launch.dq_acc.view(np.uint32)) and np.array_equal(dq, dq_again)


def _hot_loop(src: str, cfg: attention_bwd.BwdBuild) -> list[tuple[str, str]]:
    """(opcode, operands) of the main loop of flash_bwd compiled from ``src`` with ``cfg``'s options."""
    import tklab
    from tklab.toolchain.sass import loops, main_loop

    sass = tklab.compile(src, arch="sm_90a", name=attention_bwd.source_name(cfg), options=cfg.options)["flash_bwd"].sass
    ops = main_loop(sass)
    return [(o, a) for _, o, a in next(b for b in loops(sass) if [o for _, o, _ in b] == ops)]


@pytest.mark.parametrize("d,extra", [(64, {}), (128, {}), (128, {"QSTEP": 80})])
def test_step_options_off_are_the_chapter_kernel_and_on_do_what_they_say(d: int, extra: dict[str, int]) -> None:
    """At the chapter's values the variant's loop is the chapter kernel's, instruction for instruction. DQ_UNDER_DK=1
    (the chapter's): the last wgmma issued in the step is dK (A from registers); a wait that leaves one group in
    flight follows it, then dQ's part's shared stores, and only after them the wait for every group -- where
    DQ_UNDER_DK=0's step waits for every group before them. DQ_FRAGMENTS: those stores are one 16-byte store per 4
    registers of the part, and nothing else.
    STATS_EARLY: L's loads (QSTEP / 8 of 8 bytes) stand before the wait for S^T and none between the wait for dP^T and
    the next wgmma; in the chapter's step none stands before the first wait."""
    chapter = _hot_loop(SRC, attention_bwd.build(d, **extra))
    assert _hot_loop(STEP_SRC, attention_bwd.build(d, **extra)) == chapter
    cfg = attention_bwd.build(d, **extra)
    part_floats = 64 * cfg.dq_box_rows // 128  # a thread's share of the 64 x N part
    for options in ({}, AFTER, FRAGMENTS, AFTER | FRAGMENTS, {"DQ_FRAGMENTS": 0}, {"STATS_EARLY": 1}):
        loop = chapter if not options else _hot_loop(STEP_SRC, attention_bwd.build(d, **options, **extra))
        ops = [o for o, _ in loop]
        last = max(i for i, o in enumerate(ops) if o.startswith("HGMMA"))
        under = options.get("DQ_UNDER_DK", 1) == 1
        # the step's last wgmma: dK (A from registers) in the chapter's order, dQ's part (both operands in shared
        # memory) in the order before
        assert ("gdesc" not in loop[last][1].split(",")[1]) == under, loop[last]
        waits = [(i, a) for i, (o, a) in enumerate(loop) if o == "WARPGROUP.DEPBAR.LE" and i > last]
        stores = [(i, o) for i, o in enumerate(ops) if o.startswith("STS") and i > last]
        kinds = [a.split(";")[0].replace(" ", "") for _, a in waits]
        if under:
            assert kinds == ["gsb0,0x1", "gsb0,0x0"], waits
            assert waits[0][0] < stores[0][0] and stores[-1][0] < waits[1][0], (waits, stores)
        else:
            assert kinds == ["gsb0,0x0"] and waits[0][0] < stores[0][0], (waits, stores)
        if attention_bwd.build(d, **options, **extra).dq_fragments:  # named, or the chapter's at d = 128
            assert [o for _, o in stores] == ["STS.128"] * (part_floats // 4), stores
        else:
            assert "STS.128" not in [o for _, o in stores] and len(stores) >= part_floats // 2, stores
        first_wait, dp_wait = [i for i, o in enumerate(ops) if o == "WARPGROUP.DEPBAR.LE"][:2]
        next_mma = next(i for i in range(dp_wait, len(ops)) if ops[i].startswith("HGMMA"))
        loads = [i for i, o in enumerate(ops) if o.startswith("LDS")]
        if "STATS_EARLY" in options:
            assert len([i for i in loads if i < first_wait]) >= cfg.qstep // 8, (first_wait, loads)
            assert not [i for i in loads if dp_wait < i < next_mma], (dp_wait, next_mma, loads)
        else:
            assert not [i for i in loads if i < first_wait], (first_wait, loads)


def _dk_before_dq(src: str) -> tuple[str, str]:
    """(old, new) that move DQ_UNDER_DK's dK issue back before dQ's part (the chapter's order), found in the source
    rather than spelled here (the lines are the exercise's answer: tests/test_answers_nowhere.py)."""
    start = src.index("#if DQ_UNDER_DK\n")
    old = src[start:src.index("#else", start)]
    lines = old.split("\n")
    dk = next(i for i, line in enumerate(lines) if "mma_AB(dk," in line)
    dq = next(i for i, line in enumerate(lines) if "add_dq_part(" in line) - 1  # its #pragma unroll
    assert dq < dk and lines[dq].strip() == "#pragma unroll", lines
    moved = lines[:dq] + [lines[dk]] + lines[dq:dk] + lines[dk + 1:]
    return old, "\n".join(moved)


def _l_before_the_barrier(src: str) -> tuple[str, str]:
    """(old, new) that move STATS_EARLY's load of L above the wait for the step's stage (found in the source)."""
    wait = "        wait(sm.q_pipe.full[stage], ring.phase);\n"
    start = src.index(wait)
    end = src.index("#endif\n", src.index("#if STATS_EARLY\n", start)) + len("#endif\n")
    old = src[start:end]
    block = old[old.index("#if STATS_EARLY\n"):]
    return old, block + old[:old.index("#if STATS_EARLY\n")]


# Each caught on n = 300, causal, at d = 128 with the options on: as a hazard the emulator names, or as wrong numbers
STEP_MISTAKES = [
    ("dK issued before dQ's part: the wait for one group leaves dQ's part in flight", *_dk_before_dq(STEP_SRC),
     "hazard"),
    ("the step's Q handed back while dK still reads it",
     "        warpgroup::mma_async_wait<0>(dk, ds_t16);\n        sm.q_pipe.release(stage);  // Q, dO, L and D",
     "        sm.q_pipe.release(stage);\n        warpgroup::mma_async_wait<0>(dk, ds_t16);  // Q, dO, L and D",
     "race|hazard"),
    ("the last pass reads the two consumers' parts the wrong way round",
     "const int i = blockIdx.x / 2, g = blockIdx.x % 2,", "const int i = blockIdx.x / 2, g = 1 - blockIdx.x % 2,",
     "wrong"),
    ("the first pass zeroes the accumulator only for rows before the end (its rows are no queries)",
     "    if (DQ_FRAGMENTS) {  // the accumulator", "    if (DQ_FRAGMENTS && row < seq) {  // the accumulator",
     "wrong"),
    ("a part added where the other consumer's goes", "(2 * i + g) * DQ_ROWS", "(2 * i + 1 - g) * DQ_ROWS", "wrong"),
    ("STATS_EARLY: L read before the stage's barrier says the copy engine wrote it",
     *_l_before_the_barrier(STEP_SRC), "race|hazard"),
]


@pytest.mark.parametrize("what,old,new,caught", STEP_MISTAKES, ids=[m[0] for m in STEP_MISTAKES])
def test_step_options_planted_mistake_is_caught(what: str, old: str, new: str, caught: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert STEP_SRC.count(old) == 1, what
    x, options = _inputs(128, 300, seed=300), BOTH | {"STATS_EARLY": 1}
    if caught == "wrong":
        _, errs = _launch_run(x, True, src=STEP_SRC.replace(old, new), monkeypatch=monkeypatch, **options)
        assert not all(e.ok() for e in errs), f"{what}: not caught ({'; '.join(map(str, errs))})"
    else:
        with pytest.raises(Exception, match=f"(?i){caught}"):
            _launch_run(x, True, src=STEP_SRC.replace(old, new), monkeypatch=monkeypatch, **options)


P_STORE = "warpgroup::store(sm.p[me], s);"  # P into shared memory (ROWS_FILE)

# The hand-over's typical mistakes: each is a race or hazard the emulator names (n = 200, causal).
LAG_MISTAKES = [
    ("dS overwritten before the other consumer's dQ read it",
     "if constexpr (DQ_LAG) wait(sm.ds_free[x][me], lap ^ uint32_t(x ^ 1));", "", "hazard"),
    ("dS announced before it is stored",
     f"        {P_STORE}\n        warpgroup::store(sm.ds[x][me], dp);\n"
     "        fence_proxy_async();\n        if constexpr (DQ_LAG) arrive_warp(sm.ds_full[x][me]);",
     f"        arrive_warp(sm.ds_full[x][me]);\n        {P_STORE}\n"
     "        warpgroup::store(sm.ds[x][me], dp);\n        fence_proxy_async();\n", "race"),
    ("dS announced per thread on a barrier counting warps (a phase completes after 4 of 128 stores)",
     "if constexpr (DQ_LAG) arrive_warp(sm.ds_full[x][me]);", "if constexpr (DQ_LAG) arrive(sm.ds_full[x][me]);",
     "race|hazard|deadlock|hang"),
    ("dQ from this step's buffer (the other's dS may not be there yet)", "dq_from(x ^ 1);  // DQ_LAG",
     "dq_from(x);  // DQ_LAG", "race"),
    ("the other's dS waited on the wrong lap",
     "wait(sm.ds_full[x ^ 1][other], uint32_t((j - 1) >> 1) & 1);  // its",
     "wait(sm.ds_full[x ^ 1][other], uint32_t(j >> 1) & 1);  // its",
     "race|hazard|deadlock|hang"),
]


@pytest.mark.parametrize("what,old,new,match", LAG_MISTAKES, ids=[m[0] for m in LAG_MISTAKES])
def test_lagged_dq_planted_mistake_is_caught(what: str, old: str, new: str, match: str) -> None:
    assert LAG_SRC.count(old) == 1, what
    with pytest.raises(Exception, match=f"(?i){match}"):
        errs = _run_emulated(LAG_SRC.replace(old, new), 128, _inputs(128, 200), True, DQ_LAG=1)
        assert all(e.ok() for e in errs), "; ".join(map(str, errs))


def test_the_python_launch_runs_numpy_inputs_on_the_emulator() -> None:
    x = _inputs(64, 77, heads=2, seed=3)
    f = {name: bf16_to_float32(a).astype(np.float64) for name, a in x.items()}
    ref = attention_bwd.reference(f["q"], f["k"], f["v"], f["do"], causal=False)
    o, lse = to_bf16_bits(ref.o.astype(np.float32)), ref.lse.astype(np.float32)
    dq, dk, dv = attention_bwd.flash_bwd(x["q"], x["k"], x["v"], o, lse, x["do"])
    for name, got, want in (("dq", dq, ref.dq), ("dk", dk, ref.dk), ("dv", dv, ref.dv)):
        e = attention_bwd.grad_errors(name, bf16_to_float32(got), want)
        assert e.ok(), str(e)
    with pytest.raises(ValueError, match="lse must be"):
        attention_bwd.flash_bwd(x["q"], x["k"], x["v"], o, lse[:, :, :5], x["do"])


# ---- planted mistakes: each must fail ------------------------------------------------------------------
# The exercise (the chapter's kernel) keeps its planted mistakes and benign variants in
# solutions/ch11_flash_bwd/planted.toml, checked through `python -m tklab check` by tests/test_planted_mistakes.py.
# Here: mistakes in the queries-as-rows kernel (ROWS_FILE, SWAPAB=0), on d = 64, n = 200, causal (two key blocks,
# so dQ's sum over key blocks and the causal diagonal both matter).
PLANTED = [
    ("P not masked above the diagonal", "(causal && k > r)", "false"),
    ("L used in natural-log units inside exp2", "load_rows(lse + bh * seq, row0, seq, LOG2E,",
     "load_rows(lse + bh * seq, row0, seq, 1.0f,"),
    ("dQ stored instead of added over key blocks (atomics)",
     "atomicAdd(p, x.x);\n                atomicAdd(p + 1, x.y);", "p[0] = x.x;\n                p[1] = x.y;"),
]


@pytest.mark.parametrize("what,old,new", PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_mistake_is_caught(what: str, old: str, new: str) -> None:
    """Each on the build whose code it changes: the atomics are DQ_MODE 0's, the default is DQ_MODE 1."""
    assert ROWS_SRC.count(old) == 1, f"the planted mistake {what!r} no longer matches the solution"
    errs = _run_emulated(ROWS_SRC.replace(old, new), 64, _inputs(64, 200), True, DQ_MODE=0 if "atomic" in old else 1,
                         SWAPAB=0)
    assert not all(e.ok() for e in errs), f"{what}: not caught ({'; '.join(map(str, errs))})"


# ---- the GPU: against float64 torch autograd ------------------------------------------------------------
def _torch_case(b: int, h: int, n: int, d: int, *, bnhd: bool = False, mult: float = 1.0) -> tuple[Any, ...]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(n * 131 + d)
    shape = (b, n, h, d) if bnhd else (b, h, n, d)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    q = (q.float() * mult).to(torch.bfloat16)
    if bnhd:  # [b, n, h, d] in memory, seen as [b, h, n, d]: strided rows
        q, k, v, do = (x.transpose(1, 2) for x in (q, k, v, do))
    return q, k, v, do


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [1, 77, 128, 1000, 4097])
def test_backward_on_the_gpu_matches_float64_autograd(n: int, causal: bool, d: int) -> None:
    _check_gpu(*_torch_case(2, 2, n, d), causal=causal)


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("case", ["bnhd", "large_logits"])
def test_backward_on_the_gpu_layouts_and_large_logits(case: str) -> None:
    if case == "bnhd":
        _check_gpu(*_torch_case(2, 3, 333, 128, bnhd=True), causal=True)
    else:
        _check_gpu(*_torch_case(1, 2, 1000, 64, mult=8.0), causal=False)


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("n", [77, 1000])
def test_backward_on_the_gpu_with_tma_reduce_add_for_dq(n: int, d: int) -> None:
    _check_gpu(*_torch_case(1, 3, n, d), causal=True, DQ_MODE=1)


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("n,causal", [(77, True), (1000, False), (4097, True)])
def test_backward_on_the_gpu_with_dq_slots_is_right_and_the_same_bit_for_bit_on_every_run(n: int, causal: bool,
                                                                                          d: int) -> None:
    """DQ_MODE 2: every key block's share in a slot of its own, summed in key-block order by the last pass,
    so dQ is reproducible bit for bit (the atomic modes are not: bench/flash_bwd.py's determinism count)."""
    import torch

    q, k, v, do = _torch_case(2, 3, n, d)
    o, lse, first = _check_gpu(q, k, v, do, causal=causal, DQ_MODE=2)
    for _ in range(3):
        again = attention_bwd.flash_bwd(q, k, v, o, lse, do, causal=causal, DQ_MODE=2)
        assert all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(first, again, strict=True))


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("options", [{"UNIFORM": 1}, {"UNIFORM": 0}, {"PINGPONG": 0}],
                         ids=["uniform", "not_uniform", "chapter_kernel"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("n,causal", [(77, True), (1000, False), (4097, True)])
def test_backward_on_the_gpu_with_opt_in_options(n: int, causal: bool, d: int, options: dict[str, int]) -> None:
    """UNIFORM 1 and 0 at both head dimensions (each is one of them's default), the chapter's kernel at both
    (at d = 128 the default is the ping-pong variant)."""
    _check_gpu(*_torch_case(1, 3, n, d), causal=causal, **options)


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("d,options", [(128, {"DQ_LAG": 1}), (128, {"PINGPONG": 1}), (64, {"PINGPONG": 1})])
@pytest.mark.parametrize("n,causal", [(77, True), (1000, False), (4097, True)])
def test_backward_on_the_gpu_with_lagged_dq_and_ping_pong(n: int, causal: bool, d: int,
                                                          options: dict[str, int]) -> None:
    """On the real asynchrony: the dS hand-over between consumers (d = 128), and the turns."""
    _check_gpu(*_torch_case(1, 3, n, d), causal=causal, **options)


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("options", [{"SWAPAB": 1, "UNIFORM": 0}, {"SWAPAB": 1, "UNIFORM": 1},
                                     {"SWAPAB": 1, "DQ_WRITER": 0}],
                         ids=["swapab", "swapab_uniform", "swapab_no_writer"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("n,causal,case", [(1, False, ""), (77, True, ""), (128, False, ""), (1000, False, ""),
                                           (4097, True, ""), (333, True, "bnhd"), (1000, False, "large_logits")])
def test_backward_on_the_gpu_with_swapab(n: int, causal: bool, case: str, d: int, options: dict[str, int]) -> None:
    """SWAPAB: partial and single-query steps, strided [b, n, h, d] inputs, large logits."""
    _check_gpu(*_torch_case(2, 3, n, d, bnhd=case == "bnhd", mult=8.0 if case == "large_logits" else 1.0),
               causal=causal, **options)


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("n,causal,case", [(1, False, ""), (77, True, ""), (161, True, ""), (1000, False, ""),
                                           (4097, True, ""), (333, True, "bnhd"), (1000, False, "large_logits")])
def test_backward_on_the_gpu_with_swapab_80_query_steps(n: int, causal: bool, case: str) -> None:
    """SWAPAB with QSTEP=80 (d = 128): dQ^T stored transposed, 80-row boxes, steps across key blocks."""
    _check_gpu(*_torch_case(2, 3, n, 128, bnhd=case == "bnhd", mult=8.0 if case == "large_logits" else 1.0),
               causal=causal, SWAPAB=1, QSTEP=80)


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("d,options", [(64, ALL3), (128, ALL3), (128, ALL3 | {"QSTEP": 80}),
                                       (128, AFTER | {"QSTEP": 80}),
                                       (64, FRAGMENTS), (128, BOTH | {"DQ_WRITER": 0}),
                                       (128, BOTH | {"DETERMINISTIC": 1})],
                         ids=["all3_64", "all3_128", "all3_128_q80", "after_128_q80", "fragments_64", "both_no_writer",
                              "both_deterministic"])
@pytest.mark.parametrize("n,causal,case", [(1, False, ""), (77, True, ""), (1000, False, ""), (4097, True, ""),
                                           (333, True, "bnhd")])
def test_backward_on_the_gpu_with_the_step_options(n: int, causal: bool, case: str, d: int,
                                                         options: dict[str, int]) -> None:
    """DQ_UNDER_DK and DQ_FRAGMENTS (solutions/variants/ch11_step_options.cu) on the real asynchrony: dQ's part stored
    while dK runs, parked in register order, put in place by the last pass."""
    _check_gpu(*_torch_case(2, 3, n, d, bnhd=case == "bnhd"), causal=causal, **options)


def _check_gpu(q: Any, k: Any, v: Any, do: Any, *, causal: bool, **options: int) -> tuple[Any, Any, Any]:
    """The backward against float64 autograd; returns the forward's (o, lse) and the checked (dq, dk, dv)."""
    import torch

    o, lse = attention.flash_fwd(q, k, v, causal=causal)
    dq, dk, dv = attention_bwd.flash_bwd(q, k, v, o, lse, do, causal=causal, **options)
    assert dq.stride() == q.stride()
    qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=causal)
    ref = torch.autograd.grad(out, (qd, kd, vd), do.double())
    for name, got, want in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, strict=True):
        e = attention_bwd.grad_errors(name, got.double().cpu().numpy(), want.cpu().numpy())
        assert e.ok(), str(e)
    return o, lse, (dq, dk, dv)


@pytest.mark.gpu
@pytest.mark.hopper
def test_autograd_function_gives_the_kernels_gradients_for_any_incoming_layout() -> None:
    """attention_autograd.attention inside a graph: strided q, k, v (a fused projection's output) and a
    transposed incoming gradient reach the same gradients as float64 autograd."""
    import torch

    from tklab.kernels.attention_autograd import attention as course_attention

    b, n, h, d = 2, 300, 4, 64
    g = torch.Generator(device="cuda").manual_seed(5)
    qkv = torch.randn(b, n, 3, h, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    y = course_attention(q, k, v, causal=True)
    w = torch.randn(b, n, h * d, device="cuda", generator=g)
    (y.transpose(1, 2).reshape(b, n, h * d).float() * w).sum().backward()
    ref_in = qkv.detach().double().requires_grad_()
    qd, kd, vd = (ref_in[:, :, i].transpose(1, 2) for i in range(3))
    yd = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=True)
    (yd.transpose(1, 2).reshape(b, n, h * d) * w.double()).sum().backward()
    for i, name in enumerate(("dq", "dk", "dv")):
        e = attention_bwd.grad_errors(name, qkv.grad[:, :, i].double().cpu().numpy(),
                                      ref_in.grad[:, :, i].cpu().numpy())
        assert e.ok(), str(e)


@pytest.mark.gpu
@pytest.mark.hopper
def test_remembered_launches_give_the_first_calls_results_and_follow_new_inputs() -> None:
    """tklab.attention's repeated calls launch remembered bytes (attention.LAUNCHES): with dQ deterministic, every
    repeat of one step's calls (their outputs freed in between, so the allocator hands the same addresses back) gives
    the first call's o, dq, dk, dv bit for bit, the memo answering; new values written into the same inputs reach
    float64 autograd's gradients (the launches read the memory, not a copy of the first inputs)."""
    import torch

    from tklab.kernels.attention import LAUNCHES
    from tklab.kernels.attention_autograd import attention as course_attention

    b, n, h, d = 2, 300, 4, 64
    g = torch.Generator(device="cuda").manual_seed(7)
    qkv = torch.randn(b, n, 3, h, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    do = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g)

    def step() -> list[Any]:
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        o = course_attention(q, k, v, causal=True, deterministic=True)
        return [o.detach().clone(), *(x.clone() for x in torch.autograd.grad(o, (q, k, v), do))]

    first = step()
    hits = LAUNCHES.hits
    for _ in range(3):
        assert all(torch.equal(a, b_) for a, b_ in zip(step(), first, strict=True))
    assert LAUNCHES.hits >= hits + 3 * 3, "the repeats were packed anew, not remembered"
    with torch.no_grad():
        qkv.copy_(torch.randn(qkv.shape, device="cuda", generator=g))
    _, dq, dk, dv = step()
    ref_in = qkv.detach().double().requires_grad_()
    qd, kd, vd = (ref_in[:, :, i].transpose(1, 2) for i in range(3))
    ref = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=True),
                              (qd, kd, vd), do.double())
    for name, got, want in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, strict=True):
        e = attention_bwd.grad_errors(name, got.double().cpu().numpy(), want.cpu().numpy())
        assert e.ok(), str(e)


def test_a_zero_gradient_is_compared_with_an_absolute_floor_not_divided_by_zero() -> None:
    """One key: dS = P (dP - D) = 0, so dQ and dK are exactly zero; rounding noise must pass, a real
    error must not (found on the H200: rel 1e24 from a norm of 0 in the denominator)."""
    zero = np.zeros((2, 3, 1, 64))
    assert attention_bwd.grad_errors("dq", zero + 3e-6, zero).ok()
    assert not attention_bwd.grad_errors("dq", zero + 0.05, zero).ok()
    assert not attention_bwd.grad_errors("dq", zero + np.nan, zero).ok()


# ---- DETERMINISTIC=1: the key blocks add each step's dQ in turns ----------------------------------------------
# An int32 counter per (batch, head, step), zeroed by flash_bwd_prep; key block kv adds step i when the counter reads
# kv, then counts it up once its adds have landed. Run through attention_bwd's own launch (_Launches: it allocates the
# counters, filled with -1 on the CPU, so that only the first pass's zeroing lets the blocks go). The emulator runs
# blocks one after another in blockIdx order with one worker (the order the turns impose), and concurrently, on
# real threads, with several: there a block that does not wait for its turn adds when its timing says, and under
# a causal mask key block 2 reaches step 2 at its first step, key block 0 at its third, so without the turns the
# order (and dQ's last bits) changes.
DET_WORKERS = 3


def _deterministic_run(x: dict[str, np.ndarray], causal: bool, *, workers: int = 1, src: str | None = None,
                       monkeypatch: Any = None, time_limit: float = 60.0,
                       **options: int) -> tuple[Any, list[Any], np.ndarray]:
    """The backward with DETERMINISTIC=1 through attention_bwd._Launches on the emulator, flash_bwd on ``workers``
    threads (``src``: a planted kernel in place of the chapter's). Returns the launch (its fp32 dQ accumulator
    dq_acc and its counters turns), the gradient errors against float64, and dQ's bf16 bits."""
    launch, errs, grads = _emulated_backward(x, causal, src=src, monkeypatch=monkeypatch, workers=workers,
                                             poison=False, time_limit=time_limit, DETERMINISTIC=1, **options)
    return launch, errs, grads[0]


def _adders_per_step(n: int, causal: bool, cfg: attention_bwd.BwdBuild) -> list[int]:
    """How many key blocks add to each query step: every one, or under the causal mask those whose first step
    (the kernel's steps_of: kv * KV_BLOCK // QSTEP) is at or before it."""
    blocks, steps = -(-n // cfg.kv_block), -(-n // cfg.qstep)
    return [sum(1 for kv in range(blocks) if not causal or kv * cfg.kv_block // cfg.qstep <= i) for i in range(steps)]


# (d, n, heads, causal, extra options): one query; ragged lengths; three key blocks (n = 300) causal and not;
# 80-query steps that straddle key blocks
DET_CASES = [(64, 1, 1, False, {}), (64, 77, 2, True, {}), (64, 300, 2, True, {}), (64, 300, 2, False, {}),
             (128, 1, 1, True, {}), (128, 77, 2, False, {}), (128, 300, 1, True, {}), (128, 300, 2, False, {}),
             (128, 300, 1, True, {"QSTEP": 80})]


# `make test` runs two of these (both head dimensions, causal, several key blocks, 80-query steps); the rest are depth
# for `make test-full` (marker test_full): DETERMINISTIC is opt-in, and the default kernel is checked on every commit.
DET_CORE = {(64, 300, 2, True), (128, 300, 1, True)}
DET_PARAMS = [pytest.param(*c, marks=() if c[:4] in DET_CORE else pytest.mark.test_full) for c in DET_CASES]


@pytest.mark.parametrize("d,n,heads,causal,extra", DET_PARAMS)
def test_deterministic_matches_float64_and_every_step_gets_each_key_blocks_turn(d: int, n: int, heads: int,
                                                                                causal: bool,
                                                                                extra: dict[str, int]) -> None:
    """Blocks running concurrently: the gradients match float64, and every step's counter ends at the number of key
    blocks that add to it (each took its turn once, none was skipped or doubled)."""
    launch, errs, _ = _deterministic_run(_inputs(d, n, heads=heads, seed=n), causal, workers=DET_WORKERS, **extra)
    assert all(e.ok() for e in errs), "; ".join(map(str, errs))
    cfg = attention_bwd.build(d, DETERMINISTIC=1, **extra)
    want = np.broadcast_to(np.array(_adders_per_step(n, causal, cfg), np.int32),
                           attention_bwd.turns_shape(1, heads, n, cfg))
    assert np.array_equal(launch.turns, want), (launch.turns, want)


@pytest.mark.parametrize("d,causal", [(64, True), pytest.param(64, False, marks=pytest.mark.test_full),
                                      pytest.param(128, True, marks=pytest.mark.test_full)])
def test_deterministic_dq_is_the_same_bit_for_bit_in_whatever_order_the_blocks_run(d: int, causal: bool) -> None:
    """One worker (the blocks one after another, in blockIdx order) and two runs of three concurrent workers give
    the same fp32 accumulator and dQ, bit for bit (tests below plant the mistakes that break this)."""
    x = _inputs(d, 300, heads=2, seed=7)
    first, _, dq = _deterministic_run(x, causal)
    for _ in range(2):
        again, errs, dq_again = _deterministic_run(x, causal, workers=DET_WORKERS)
        assert all(e.ok() for e in errs), "; ".join(map(str, errs))
        assert np.array_equal(again.dq_acc.view(np.uint32), first.dq_acc.view(np.uint32))
        assert np.array_equal(dq_again, dq)


DET_SRC = attention_bwd.source(attention_bwd.build(64, DETERMINISTIC=1))
_TURN_WAIT = "            turn::wait_for(turns + bh_steps + i, causal ? last - kv : kv);"
_TURN_PASS = "        if constexpr (DETERMINISTIC) turn::pass_after_bulk_stores(turns + bh_steps + i);"
_RELEASE = ('        if constexpr (DETERMINISTIC) asm volatile("red.release.gpu.global.add.s32 [%0], 1;" '
            '::"l"(turns + bh_steps + i) : "memory");')
# (what, the lines replaced: old -> new, how it shows). "order": dQ's bits differ from the blockIdx-order run in at
# least one of three concurrent runs; "hang": a block waits for a turn that never comes (the launch's time limit).
DET_MISTAKES = [
    ("the turn not waited for", [(_TURN_WAIT, "        //")], "order"),
    ("the turn passed before this block's adds (an increment before their completion)",
     [(_TURN_PASS, "        //"), (_TURN_WAIT, _TURN_WAIT + "\n" + _RELEASE + "\n        //")], "order"),
    pytest.param("the counters not zeroed by the first pass",
                 [("if (DETERMINISTIC && row % QSTEP == 0) dq_turns[bh * steps + row / QSTEP] = 0;", "")], "hang",
                 marks=pytest.mark.test_full),  # a hang until the time limit: `make test-full`
    pytest.param("causal: the turns in key-block order while the blocks run from the last key block",
                 [(_TURN_WAIT, _TURN_WAIT.replace("causal ? last - kv : kv", "kv"))], "hang",
                 marks=pytest.mark.test_full),
]


@pytest.mark.parametrize("what,edits,caught", DET_MISTAKES,
                         ids=[(m.values if hasattr(m, "values") else m)[0] for m in DET_MISTAKES])
def test_deterministic_planted_mistake_is_caught(what: str, edits: list[tuple[str, str]], caught: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """d = 64, n = 300: three key blocks. The order mistakes without a mask, where all three reach every step together
    and the threads' timing orders their adds (under a causal mask the blocks are launched in the order they reach a
    step, so the emulator's threads seldom break it there; a GPU's timing may). The hangs under a causal mask.
    What the emulator cannot show: the turn passed after cp.async.bulk.wait_group.read instead of the full wait (it
    performs a TMA store at the issuing thread's next bulk wait, .read or not, so the adds have always landed by
    then), and the proxy fences (accepted, ordering nothing for global memory there)."""
    src = DET_SRC
    for old, new in edits:
        assert src.count(old) == 1, what
        src = src.replace(old, new)
    x = _inputs(64, 300, heads=2, seed=7)
    if caught == "hang":
        with pytest.raises(Exception, match="(?i)time limit"):
            # one worker: the blocks one after another in launch order, as on a GPU whose grid does not fit at once
            _deterministic_run(x, True, src=src, monkeypatch=monkeypatch, time_limit=10.0)
        return
    good, _, _ = _deterministic_run(x, False)  # the chapter's kernel, blocks in blockIdx order
    runs = []
    for _ in range(3):
        bad, errs, _ = _deterministic_run(x, False, workers=DET_WORKERS, src=src, monkeypatch=monkeypatch)
        assert all(e.ok() for e in errs), f"{what}: the order, not the numbers, is what breaks ({errs})"
        runs.append(int((bad.dq_acc.view(np.uint32) != good.dq_acc.view(np.uint32)).sum()))
        if runs[-1]:
            return
    pytest.fail(f"{what}: dQ the same bit for bit in {len(runs)} concurrent runs, not caught")


def test_deterministic_is_an_opt_in_of_the_chapters_kernel_with_its_dq_writer() -> None:
    for d in (64, 128):
        assert attention_bwd.build(d, DETERMINISTIC=0).options == attention_bwd.build(d).options  # the default
        cfg = attention_bwd.build(d, DETERMINISTIC=1)
        assert cfg.swapab and cfg.deterministic and "-DDETERMINISTIC=1" in cfg.options
        assert not attention_bwd.build(d).deterministic
        assert cfg.shared_bytes == attention_bwd.build(d).shared_bytes  # the counters live in global memory
    assert attention_bwd.build(128, DETERMINISTIC=1, QSTEP=80).qstep == 80
    for d, opts in [(64, {"SWAPAB": 0}), (128, {"DQ_MODE": 2}), (128, {"PINGPONG": 1}), (64, {"DQ_WRITER": 0}),
                    (64, {"CONSUMERS": 1})]:
        with pytest.raises(ValueError, match="DETERMINISTIC=1 is an option of SWAPAB=1's kernel"):
            attention_bwd.build(d, DETERMINISTIC=1, **opts)
    with pytest.raises(ValueError, match="DETERMINISTIC must be 0 or 1"):
        attention_bwd.build(64, DETERMINISTIC=2)
    # one counter per (batch, head, step): O(N), against DQ_MODE 2's copy of dQ per key block
    cfg = attention_bwd.build(128, DETERMINISTIC=1)
    assert attention_bwd.turns_shape(2, 16, 4096, cfg) == (2, 16, 64)
    assert attention_bwd.dq_scratch_shape(2, 16, 4096, cfg) == (2, 16, 4096, 128)
    # the autograd op's deterministic path: the turns on the chapter's kernel, the slots on the rows kernel
    assert attention_bwd.deterministic_options(64) == {"DETERMINISTIC": 1}
    assert attention_bwd.deterministic_options(128, SWAPAB=0) == {"SWAPAB": 0, "DQ_MODE": 2}


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_deterministic_on_the_gpu_is_right_and_the_same_bit_for_bit_on_every_run(causal: bool, d: int) -> None:
    """DETERMINISTIC=1 at B = 2, H = 16, N = 4096 (32 key blocks per head in turns): against float64 autograd,
    then three more runs bit for bit the same (the default's reduce-adds are not: bench/flash_bwd.py's determinism
    count); and through the autograd op's deterministic path."""
    import torch

    from tklab.kernels.attention_autograd import attention as course_attention

    q, k, v, do = _torch_case(2, 16, 4096, d)
    o, lse, first = _check_gpu(q, k, v, do, causal=causal, DETERMINISTIC=1)
    for _ in range(3):
        again = attention_bwd.flash_bwd(q, k, v, o, lse, do, causal=causal, DETERMINISTIC=1)
        assert all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(first, again, strict=True))
    grads = []
    for _ in range(2):
        qg, kg, vg = (x.detach().clone().requires_grad_() for x in (q, k, v))
        course_attention(qg, kg, vg, causal=causal, deterministic=True).backward(do)
        grads.append([x.grad for x in (qg, kg, vg)])
    assert all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(*grads, strict=True))
    assert torch.equal(grads[0][0].view(torch.int16), first[0].view(torch.int16))


def _writer_tail(sass: str) -> list[str]:
    """flash_bwd's instructions from the last TMA reduce-add to the turn's release (REDG ... STRONG.GPU), opcodes
    with their operands; [] without a release."""
    import re

    lines = [ln.split(";")[0].strip() for ln in sass.splitlines() if ";" in ln]
    ops = [re.sub(r"^/\*[0-9a-f]+\*/\s*", "", ln) for ln in lines]
    release = [j for j, op in enumerate(ops) if op.startswith("REDG") and "STRONG.GPU" in op]
    if not release:
        return []
    start = max(j for j, op in enumerate(ops[:release[-1]]) if op.startswith("UTMAREDG"))
    return ops[start:release[-1] + 1]


@pytest.mark.parametrize("d,extra", [(64, {}), (128, {}), (128, {"QSTEP": 80})])
def test_deterministic_build_compiles_to_an_acquire_spin_and_a_release_after_the_adds_complete(
        d: int, extra: dict[str, int]) -> None:
    """What the turns compiled to (the emulator lands a TMA store at the issuing thread's first bulk wait, so it
    cannot tell wait_group.read from the full wait): the spin is a strong GPU-scope load with NANOSLEEP; after the
    writer's last reduce-add come two bulk waits, the source read (before the buffer goes back to the consumers)
    and the adds' completion. ptxas gives both the same DEPBAR.LE SB0, 0x0; the full wait adds CCTL.IVALL (this
    SM's L1 dropped, so that what completed in global memory is what it reads next). Then the proxy fence
    (FENCE.VIEW.ASYNC.G), a GPU-scope fence, and only then the release (REDG ... STRONG.GPU). The default build has
    none of it; DETERMINISTIC builds neither spill nor serialize wgmma. A planted pass_after_bulk_stores that waits
    with .read only compiles without the CCTL.IVALL, and fails here."""
    import re

    import tklab

    cfg = attention_bwd.build(d, DETERMINISTIC=1, **extra)
    srcs = {"chapter": attention_bwd.source(cfg),
            # the planted mistake: the turn passed once the adds have READ shared memory, not once they completed
            "read only": attention_bwd.source(cfg).replace("#include \"tk/hopper/turns.cuh\"",
                                                          "#define store_wait store_wait_read\n"
                                                          "#include \"tk/hopper/turns.cuh\"")}
    tails = {}
    for name, src in srcs.items():
        mod = tklab.compile(src, arch="sm_90a", name=attention_bwd.KERNEL.name, options=cfg.options)
        sass = mod["flash_bwd"].sass
        tails[name] = _writer_tail(sass)
        if name == "chapter":
            assert mod.constants["flash_bwd_shared_bytes"] == cfg.shared_bytes
            assert mod["flash_bwd"].spill_bytes == 0 and not [ln for ln in mod.log.splitlines() if "C75" in ln]
            assert "NANOSLEEP" in sass and re.search(r"LDG\.E\.STRONG\.GPU", sass)
    tail = tails["chapter"]
    assert tail, "no release after the reduce-adds"
    waits = [j for j, op in enumerate(tail) if op.startswith("DEPBAR.LE SB0, 0x0")]
    assert len(waits) == 2, tail
    after = tail[waits[-1]:]  # from the adds' completion to the release, in this order
    steps = [next(j for j, op in enumerate(after) if op.startswith(name))
             for name in ("CCTL.IVALL", "FENCE.VIEW.ASYNC.G", "MEMBAR.ALL.GPU", "REDG")]
    assert steps == sorted(steps), after
    assert tails["read only"] and "CCTL.IVALL" not in tails["read only"], tails["read only"]
    default = tklab.compile(attention_bwd.source(attention_bwd.build(d, **extra)), arch="sm_90a",
                            name=attention_bwd.KERNEL.name, options=attention_bwd.build(d, **extra).options)
    assert not _writer_tail(default["flash_bwd"].sass) and "NANOSLEEP" not in default["flash_bwd"].sass
