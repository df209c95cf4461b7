"""Chapter 10's kernel does what chapter 10 teaches, in the SASS that runs: block j's exponentials are issued
while P_{j-1} V_{j-1} is still in flight (``tklab.toolchain.overlap``), in every overlapped build the project
ships; and the exercise's static check fails a loop whose SASS waits for P V before the softmax, in the
chapter's words. No GPU: NVRTC and cuobjdump only."""

from __future__ import annotations

import planted
import pytest
from scripts import load_script

import tklab
from tklab import attention, specs
from tklab.grading import spec_kit
from tklab.grading.spec_kit import StaticContext
from tklab.toolchain import overlap
from tklab.toolchain.locate import REPO

pytestmark = pytest.mark.nvrtc


# ---- the rule, on SASS written by hand ------------------------------------------------------------------
def _sass(*body: str, loop: bool = True) -> str:
    """A kernel whose instructions from the second on form a loop (a branch back to them at the end)."""
    lines = ["MOV R0, RZ ;", *body, "@P0 BRA 0x10 ;" if loop else "NOP ;", "EXIT ;"]
    return "\n".join(f"        /*{16 * i:04x}*/                   {ln}" for i, ln in enumerate(lines))


S = ("HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24, gsb0 ;")
PV = ("HGMMA.64x128x16.F32.BF16 R88, R120, gdesc[UR8].tnspB, R88, gsb0 ;",)
WAIT_S, WAIT_PV = "WARPGROUP.DEPBAR.LE gsb0, 0x1 ;", "WARPGROUP.DEPBAR.LE gsb0, 0x0 ;"
EX2 = ("MUFU.EX2 R24, R24 ;", "MUFU.EX2 R25, R25 ;", "@P1 MUFU.EX2 R26, R26 ;")
RELEASE = "@!P2 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR12+0x10], RZ ;"


def test_exponentials_between_the_wait_for_s_and_the_wait_for_pv_are_under_the_product():
    o = overlap.softmax_under_pv(_sass(*S, *PV, WAIT_S, *EX2, RELEASE, WAIT_PV))
    assert (o.under, o.total, o.loop, o.waits_for_one) == (3, 3, True, True) and o.share == 1.0


def test_a_wait_for_pv_moved_above_the_exponentials_leaves_none_under_it():
    o = overlap.softmax_under_pv(_sass(*S, *PV, WAIT_S, RELEASE, WAIT_PV, *EX2))
    assert (o.under, o.total, o.waits_for_one) == (0, 3, True)
    assert "0 of the key loop's 3 exponentials" in str(o)


def test_a_wait_for_one_with_nothing_left_in_flight_overlaps_nothing():
    """Each product waited for at once, then a wait<1> as the overlapped loop has it: no group is in flight
    at the exponentials, though they lie between a gsb0, 0x1 and a gsb0, 0x0 wait."""
    o = overlap.softmax_under_pv(_sass(*S, WAIT_PV, *PV, WAIT_PV, WAIT_S, *EX2, WAIT_PV))
    assert (o.under, o.total, o.waits_for_one) == (0, 3, False)


def test_a_group_issued_at_the_end_of_a_step_runs_under_the_next_steps_start():
    o = overlap.softmax_under_pv(_sass(*EX2, WAIT_PV, *S, WAIT_PV, *PV))
    assert (o.under, o.total) == (3, 3)


def test_without_a_loop_of_products_and_exponentials_there_is_no_key_loop():
    assert not overlap.softmax_under_pv(_sass(*S, *PV, WAIT_S, *EX2, WAIT_PV, loop=False)).loop
    assert not overlap.softmax_under_pv(_sass(*EX2)).loop  # exponentials, no product
    assert not overlap.softmax_under_pv(_sass(*S, WAIT_PV)).loop  # products, no exponential


# ---- every shipped build of chapter 10's kernel -------------------------------------------------------------
def _bench_variants() -> dict[str, tuple[str, dict[str, int], tuple[int, ...]]]:
    """bench/flash_fwd.py's variants built from the shipped kernel (not its planted ones)."""
    module = load_script(REPO / "bench" / "flash_fwd.py", "flash_fwd_bench")
    # "@base" variants compile another commit's kernel (bench/_base/): not a shipped build
    return {name: v for name, v in module.VARIANTS.items() if name not in module.PLANTED and "@base" not in name}


def _shipped() -> list[tuple[int, dict[str, int]]]:
    """(d, options) of every overlapped build: the launch's defaults and bench/flash_fwd.py's variants of the
    Hopper kernel (SCHEDULE 0, the plain loop, overlaps nothing by design), each set of -D options once."""
    rows = [(d, {}) for d in attention.DEFAULTS["hopper"]]
    rows += [(d, opts) for kernel, opts, dims in _bench_variants().values() if kernel == "hopper" for d in dims]
    seen, out = set(), []
    for d, opts in rows:
        b = attention.build("hopper", d, **opts)
        if b.option("SCHEDULE") and b.options not in seen:
            seen.add(b.options)
            out.append((d, opts))
    return out


SHIPPED = _shipped()


def _kernel(source: str, b: attention.Build) -> tklab.Kernel:
    return tklab.compile(source, arch="sm_90a", name="ch10_flash.cu", options=b.options)["flash_fwd"]


def test_the_shipped_builds_are_the_defaults_and_the_bench_variants():
    # 19 distinct option sets when written; the shuffled consumer index (once UNIFORM=1) is in every build since
    assert (64, {}) in SHIPPED and (128, {}) in SHIPPED and len(SHIPPED) >= 18


@pytest.mark.parametrize("d,opts", SHIPPED,
                         ids=[f"d{d}" + "".join(f"-{k}{v}" for k, v in o.items()) for d, o in SHIPPED])
def test_every_shipped_build_computes_the_softmax_under_pv(d: int, opts: dict[str, int]):
    b = attention.build("hopper", d, **opts)
    o = overlap.softmax_under_pv(_kernel(b.source.read_text(), b).sass)
    # one MUFU exponential per score of a 128-key block and more; EXP2_SPLIT=n takes n of each 8 to the FMA pipe
    poly = b.option("EXP2_SPLIT") if any(f.startswith("-DEXP2_SPLIT=") for f in b.options) else 0
    assert o.loop and o.total >= 64 * (8 - poly) // 8, (b.options, o)
    assert o.share >= 0.5, f"{' '.join(b.options)}: {o}"


# ---- the exercise's static check ----------------------------------------------------------------------------
SPEC = specs.get("ch10_flash")
CHECK = next(c for c in SPEC.static if c.name == "softmax under P·V (SASS)")
MUTATIONS = {m.name: m for m in planted.load("ch10_flash")}


def _verdict(source: str) -> spec_kit.StaticResult:
    mod = tklab.compile(source, arch=SPEC.arch, name=SPEC.filename, options=SPEC.options)
    ctx = StaticContext(spec=SPEC, source=source, program=SPEC.filename, arch=SPEC.arch, module=mod,
                        kernel=mod[SPEC.kernel])
    return CHECK.run(ctx)


def test_the_solution_passes_the_static_check():
    r = _verdict((REPO / SPEC.solution).read_text())
    assert r.ok, r.detail


@pytest.mark.parametrize("d", sorted(attention.DEFAULTS["hopper"]))
def test_k_released_right_after_the_wait_for_s_lets_ptxas_wait_for_pv_before_the_softmax(d: int):
    """The planted mistake is the loop as the kernel had it: right in the source's order, wrong in the SASS's."""
    b = attention.build("hopper", d)
    text = planted.apply(b.source.read_text(), MUTATIONS["k_released_before_the_softmax"])
    assert overlap.softmax_under_pv(_kernel(text, b).sass).share < 0.5
    if b.options == SPEC.options:
        r = _verdict(text)
        assert not r.ok
        assert "the wait for P V_{j-1} comes before the softmax" in r.detail and "SASS" in r.detail
        assert "a stage handed back between the two waits" in r.detail  # why ptxas did it
        assert "exponentiated" not in r.detail  # the remedy is the hint ladder's, not the verdict's


def test_a_loop_that_waits_for_each_product_at_once_fails_for_the_overlap_it_lacks():
    r = _verdict(planted.apply((REPO / SPEC.solution).read_text(), MUTATIONS["no_overlap"]))
    assert not r.ok and "every product is waited for before the softmax" in r.detail, r.detail


def test_the_untouched_exercise_fails_it_saying_what_the_loop_must_do():
    r = _verdict((REPO / "exercises" / SPEC.exercise_file).read_text())
    assert not r.ok and "no loop issues both wgmma" in r.detail, r.detail


def test_the_outline_reads_the_loop_in_order_with_the_groups_in_flight():
    lines = overlap.outline(_sass(*S, *PV, WAIT_S, *EX2, RELEASE, WAIT_PV))
    assert [ln.split()[0] for ln in lines] == ["2", "1", "WARPGROUP.DEPBAR.LE", "3", "SYNCS.ARRIVE.TRANS64.A1T0",
                                               "WARPGROUP.DEPBAR.LE"]
    assert [ln.split()[-3] for ln in lines] == ["1", "2", "1", "1", "1", "0"]  # groups in flight after each
    assert "MUFU.EX2" in lines[3] and "a stage handed back" in lines[4]
