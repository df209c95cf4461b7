"""Chapter 10's forward with its softmax options (solutions/variants/ch10_softmax_split.cu, built by
``attention.build(..., EXP2_SPLIT=n, MASK_SPLIT=1)``): right on the CPU emulator against float64 on awkward shapes,
and doing what they claim in the SASS -- EXP2_SPLIT=n takes n of each 8 MUFU.EX2 out of the key loop, MASK_SPLIT=1
gives the blocks without a mask a loop with no mask code -- while with both off the file compiles to the chapter
kernel's SASS byte for byte."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tklab import attention, sass
from tklab.run.arrays import bf16_to_float32, to_bf16_bits
from tklab.run.limits import ConfigError
from tklab.toolchain.compiler import compile as nvrtc_compile

emu = pytest.importorskip("tklab.emulate")
ROOT = Path(__file__).resolve().parent.parent


def _run(d: int, n: int, causal: bool, library: Path | None = None,
         **options: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(o, lse, reference o, reference lse) of one build on the emulator, b = 1, h = 2, the output poisoned;
    ``library``: a copy of cuda/ whose headers the kernel includes instead."""
    cfg = attention.build("hopper", d, **options)
    assert cfg.source == attention.SPLIT_FILE
    b, h = 1, 2
    rng = np.random.default_rng(n + 3 * d + int(causal))
    q, k, v = (to_bf16_bits(rng.standard_normal((b, h, n, d)).astype(np.float32)) for _ in range(3))
    o, lse = np.full((b, h, n, d), 0xFFFF, np.uint16), np.full((b, h, n), np.nan, np.float32)
    bc = cfg.option("BC")
    maps = [emu.tensor_map(x, (rows, d), dtype="bfloat16") for x, rows in ((q, 64), (k, bc), (v, bc), (o, 64))]
    text = cfg.text()
    if library is not None:
        text = re.sub(r'#include "(tk[^"]*)"', lambda m: f'#include "{library / m.group(1)}"', text)
    mod = emu.compile(text, name=cfg.source.name, options=cfg.options)
    mod["flash_fwd"](attention.launch_grid(cfg, b, h, n), (cfg.threads,),
                     (*maps, lse, h, n, np.float32(1 / np.sqrt(d)), int(causal)), shared_mem=cfg.shared_bytes)
    ref_o, ref_lse = attention.naive(*(bf16_to_float32(x) for x in (q, k, v)), causal=causal)
    return bf16_to_float32(o), lse, ref_o, ref_lse


def _close(o: np.ndarray, lse: np.ndarray, ref_o: np.ndarray, ref_lse: np.ndarray) -> None:
    assert not np.isnan(o).any() and not np.isnan(lse).any(), "an output was never written"
    np.testing.assert_allclose(o, ref_o, atol=2e-2, rtol=2e-2)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3)


# N = 1 (one key, one row: every block ragged), 77 (one partial key block), 300 (at d = 64 two full key blocks of
# 128 before a partial one, so MASK_SPLIT's first loop runs; at d = 128 one of 176), causal and not. EXP2_SPLIT=8
# takes every score through the cubic; 3 splits each subtile's rows unevenly.
CASES = [(d, n, causal, opts) for d in (64, 128) for n in (1, 77, 300) for causal in (False, True)
         for opts in ({"EXP2_SPLIT": 3}, {"MASK_SPLIT": 1})]
CASES += [(64, 300, True, {"EXP2_SPLIT": 8, "MASK_SPLIT": 1}), (128, 300, False, {"EXP2_SPLIT": 2, "MASK_SPLIT": 1}),
          (64, 520, False, {"MASK_SPLIT": 1, "SCHEDULE": 2, "CONSUMERS": 2})]


# `make test` runs one case of each option and of both together (what a commit can break in them); the other
# shapes are depth for `make test-full` (marker test_full): both options are opt-in variants of chapter 10's kernel,
# whose own default build the main step checks on every commit.
CORE = {(64, 300, True, (("EXP2_SPLIT", 3),)), (128, 77, False, (("MASK_SPLIT", 1),)),
        (64, 300, True, (("EXP2_SPLIT", 8), ("MASK_SPLIT", 1)))}
PARAMS = [pytest.param(*c, marks=() if (c[0], c[1], c[2], tuple(c[3].items())) in CORE else pytest.mark.test_full)
          for c in CASES]


@pytest.mark.parametrize("d,n,causal,opts", PARAMS, ids=lambda x: "-".join(f"{k}{v}" for k, v in x.items())
                         if isinstance(x, dict) else str(x))
def test_options_match_float64_on_the_emulator(d: int, n: int, causal: bool, opts: dict[str, int]) -> None:
    _close(*_run(d, n, causal, **opts))


def test_the_cubic_is_what_runs_under_exp2_split(tmp_path: Path) -> None:
    """EXP2_SPLIT=8 with exp2_poly's cubic made wrong (2^f's linear term 10 % too large), in a copy of the library
    the kernel includes, must fail the check above: it sees the option's exponentials, not MUFU's."""
    library = shutil.copytree(ROOT / "cuda", tmp_path / "cuda")
    header = library / "tk" / "common" / "exp2_poly.cuh"
    right = "c1 = 0.6951168179512024f"
    assert right in header.read_text()
    header.write_text(header.read_text().replace(right, "c1 = 0.7646285f"))
    with pytest.raises(AssertionError):
        _close(*_run(64, 77, False, library=library, EXP2_SPLIT=8))
    _close(*_run(64, 77, False, library=library, EXP2_SPLIT=0, MASK_SPLIT=1))  # the copy itself is sound


# ---- the SASS (NVRTC, no GPU) --------------------------------------------------------------------------------
def _key_loops(k) -> list[list[str]]:  # noqa: ANN001 - a tklab Kernel
    """The opcodes of every loop that issues wgmma (the key loops), in address order."""
    loops = [[o for _, o, _ in body] for body in sass.loops(k.sass)]
    return [ops for ops in loops if any(o.startswith("HGMMA") for o in ops)]


def _ex2(ops: list[str]) -> int:
    return sum(o.startswith("MUFU.EX2") for o in ops)


@pytest.mark.parametrize("d", [64, 128])
def test_both_off_is_the_chapter_kernel_byte_for_byte(d: int) -> None:
    base = attention.build("hopper", d)
    assert base.source.name == "ch10_flash.cu"  # the defaults build the chapter's kernel, not the variant
    shipped = attention.compiled(base, "sm_90a")
    off = nvrtc_compile(attention.SPLIT_FILE.read_text(), arch="sm_90a", name=attention.SPLIT_FILE.name,
                        options=base.options + ("-DEXP2_SPLIT=0", "-DMASK_SPLIT=0"))["flash_fwd"]
    assert off.sass == shipped.sass


@pytest.mark.parametrize("d", [64, 128])
def test_exp2_split_takes_n_of_each_8_exponentials_off_mufu(d: int) -> None:
    """Per key block a lane exponentiates BC / 2 scores (8 per 16 x 16 subtile) and 2 rescale factors; EXP2_SPLIT=n
    moves exactly n per subtile to the cubic, which adds FFMA and no MUFU."""
    bc = attention.DEFAULTS["hopper"][d]["BC"]
    (base,) = _key_loops(attention.compiled(attention.build("hopper", d), "sm_90a"))
    assert _ex2(base) == bc // 2 + 2, _ex2(base)
    for n in (1, 2, 4):
        k = attention.compiled(attention.build("hopper", d, EXP2_SPLIT=n), "sm_90a")
        assert k.spill_bytes == 0, (n, k.spill_bytes)
        (loop,) = _key_loops(k)
        print(f"d={d} EXP2_SPLIT={n}: MUFU.EX2 in the key loop {_ex2(base)} -> {_ex2(loop)}, "
              f"instructions {len(base)} -> {len(loop)}")
        assert _ex2(loop) == _ex2(base) - n * bc // 16
        assert sum(o.startswith("FFMA") for o in loop) >= sum(o.startswith("FFMA") for o in base) + 3 * n * bc // 16


@pytest.mark.parametrize("d", [64, 128])
def test_mask_split_gives_the_unmasked_blocks_a_loop_without_the_mask(d: int) -> None:
    """The mask is one FSEL to -inf per score a lane holds (BC / 2 of them, behind compares of key and row): the
    default's single key loop carries them, ptxas having predicated the mask's branches; under MASK_SPLIT=1 the
    first of two key loops has none and is shorter, the second keeps them."""
    bc = attention.DEFAULTS["hopper"][d]["BC"]

    def fsel(ops: list[str]) -> int:
        return sum(o.startswith("FSEL") for o in ops)

    (base,) = _key_loops(attention.compiled(attention.build("hopper", d), "sm_90a"))
    assert fsel(base) >= bc // 2, fsel(base)
    k = attention.compiled(attention.build("hopper", d, MASK_SPLIT=1), "sm_90a")
    assert k.spill_bytes == 0, k.spill_bytes
    unmasked, masked = _key_loops(k)
    print(f"d={d} MASK_SPLIT=1: key loop {len(base)} instructions ({fsel(base)} FSEL) -> unmasked {len(unmasked)} "
          f"({fsel(unmasked)} FSEL), masked {len(masked)} ({fsel(masked)} FSEL)")
    assert fsel(unmasked) == 0 and fsel(masked) >= bc // 2
    assert len(unmasked) < len(base) - bc // 2
    assert _ex2(unmasked) == _ex2(masked) == _ex2(base)  # the same exponentials, only the mask gone


#: A generic lambda: one with an ``auto`` parameter or a template parameter list (``[&](int j, auto m)``,
#: ``[&]<bool M>(...)``). NVRTC 13.0 (13.0.88, the H200's) takes its operator() template for a host function and
#: refuses it in device code ("host functions are not allowed in JIT mode"); 13.5 compiles it, so a build here
#: cannot tell. MASK_SPLIT's step was one once (bench/flash_fwd.py's "ch10 split mask" failed on the H200).
GENERIC_LAMBDA = re.compile(r"\[[^\]\n]*\]\s*(?:<\s*(?:class|typename|bool|int|auto)\b[^>]*>\s*)?(?:__device__\s*)?"
                            r"\([^)\n]*\bauto\b|\[[^\]\n]*\]\s*<\s*(?:class|typename|bool|int)\b")


def test_no_device_source_has_a_generic_lambda_which_nvrtc_13_0_refuses() -> None:
    for line, generic in [("auto step = [&](int j, auto masked) {", True), ("auto s = [&]<bool M>(int j) {", True),
                          ("[](auto x) { return x; }", True), ("x = a[i] < b;", False),
                          ("for_each_pair(t, [&](const float2& v, rc at, rc e0, rc e1) {", False)]:
        assert bool(GENERIC_LAMBDA.search(line)) == generic, line
    sources = [p for pattern in ("solutions/**/*.cu", "exercises/*.cu", "cuda/**/*.cuh", "cuda/**/*.cu",
                                 "tests/kernels/*.cu") for p in sorted(ROOT.glob(pattern))]
    assert attention.SPLIT_FILE in sources
    found = [f"{p.relative_to(ROOT)}:{i}: {text.strip()}" for p in sources
             for i, text in enumerate(p.read_text().splitlines(), 1) if GENERIC_LAMBDA.search(text)]
    assert not found, "generic lambdas, which NVRTC 13.0 refuses in device code:\n" + "\n".join(found)


@pytest.mark.parametrize("d", [64, 128])
def test_mask_split_compiles_for_every_bench_variant(d: int) -> None:
    """MASK_SPLIT=1 as bench/flash_fwd.py builds it (alone, with EXP2_SPLIT, under ping-pong) compiles with this
    NVRTC; with NVRTC 13.0 too since its step is no generic lambda (the test above)."""
    for opts in ({"MASK_SPLIT": 1}, {"MASK_SPLIT": 1, "EXP2_SPLIT": 1}, {"MASK_SPLIT": 1, "EXP2_SPLIT": 2},
                 {"MASK_SPLIT": 1, "SCHEDULE": 1}):
        k = attention.compiled(attention.build("hopper", d, **opts), "sm_90a")
        assert k.spill_bytes == 0, (opts, k.spill_bytes)


def test_build_refuses_what_the_options_cannot_do() -> None:
    with pytest.raises(ConfigError, match="EXP2_SPLIT must be 0-8"):
        attention.build("hopper", 64, EXP2_SPLIT=9)
    with pytest.raises(ConfigError, match="MASK_SPLIT=1 splits the key loop"):
        attention.build("hopper", 128, MASK_SPLIT=1, SCHEDULE=0)
    with pytest.raises(ConfigError, match="not of PERSISTENT"):
        attention.build("hopper", 128, EXP2_SPLIT=2, PERSISTENT=1)
    on = attention.build("hopper", 64, MASK_SPLIT=1)
    assert "-DEXP2_SPLIT=0" in on.options and "-DMASK_SPLIT=1" in on.options  # the file needs both
    assert not any("SPLIT" in f for f in attention.build("hopper", 64).options)
