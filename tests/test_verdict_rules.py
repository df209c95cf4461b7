"""The rules behind a verdict (issue 23): O's relative-RMS tolerance, the adversarial "rising" attention inputs,
the emulated cases that exercise the loops, "PASSED on n of m cases", the overlap floor's judgement."""

from __future__ import annotations

import numpy as np
import pytest
from answers import answer

from tklab.grading import cases as emu_cases
from tklab.grading import judge, running, specs
from tklab.grading.judge import compare
from tklab.grading.verdict import CheckResult
from tklab.run.arrays import bf16_to_float32, isclose, relative_rms


def test_relative_rms_tolerance_catches_a_small_uniform_error_an_absolute_one_passes() -> None:
    rng = np.random.default_rng(0)
    expected = 0.1 * rng.standard_normal((64, 128))
    off = expected * 1.05  # every element 5 % off: far outside bf16 rounding, inside an absolute 2e-2
    assert isclose(off, expected, 2e-2, 2e-2).all()
    bad = ~isclose(off, expected, *specs.get("ch10_flash").tolerance("O"))
    assert bad.any() and relative_rms(off, expected) == pytest.approx(0.05)
    right = expected + 1e-3 * rng.standard_normal(expected.shape)  # ~1 % relative RMS noise: within bounds
    assert isclose(right, expected, *specs.get("ch10_flash").tolerance("O")).all()
    nan = right.copy()
    nan[3, 4] = np.nan  # never written
    assert not isclose(nan, expected, *specs.get("ch10_flash").tolerance("O"))[3, 4]
    m = compare("O", off, expected, *specs.get("ch10_flash").tolerance("O"))
    assert not m["ok"] and m["relative_rms"] == pytest.approx(0.05) and m["rms_bound"] == 1e-2
    assert specs.get("ch10_flash").tolerance("LSE") == (2e-2, 2e-2, None)


@pytest.mark.parametrize("exercise, build", [("ch09_flash", ("tiles", 128)), ("ch10_flash", ("hopper", 128))])
def test_rising_inputs_raise_every_rows_maximum_in_every_key_block(exercise: str, build: tuple[str, int]) -> None:
    from tklab.kernels import attention

    bc = attention.build(*build).option("BC")  # the key-block width, from its one home
    spec = specs.get(exercise)
    case = next(d for d in spec.emu_cases if d.get("rising"))
    assert case in spec.cases and not case["causal"]
    for seed in range(4):  # by construction, not by luck: any seed
        x = spec.inputs(np.random.default_rng(seed), case)
        q, k = (bf16_to_float32(x[n]).astype(np.float64)[0, 0] for n in ("Q", "K"))
        s = q @ k.T / np.sqrt(q.shape[1])
        blocks = [s[:, j:j + bc].max(axis=1) for j in range(0, case["N"], bc)]
        assert len(blocks) >= 3
        for before, after in zip(blocks, blocks[1:], strict=False):
            assert (after > before).all()


def test_emulated_cases_exercise_the_loops() -> None:

    ch08 = emu_cases.cases(specs.get("ch08_wgmma"))
    assert any(d["K"] // 64 > 4 and d["M"] // 64 > 1 and d["N"] // 256 > 1 for d in ch08)  # ring wraps, tiles
    from tklab.kernels import attention

    bc = attention.build("hopper", 128).option("BC")
    ch10 = emu_cases.cases(specs.get("ch10_flash"))
    assert any(d["causal"] and -(-d["N"] // bc) > 2 and d["N"] % bc for d in ch10)  # wraps, diagonal, tail
    for e in ("ch07_tma_ring", "ch08_wgmma", "ch10_flash"):  # TMA: at least two completion orders
        assert len({d.get("tma_order", 0) for d in emu_cases.cases(specs.get(e))}) >= 2, e
    assert emu_cases.left_to_gpu(specs.get("ch08_wgmma")) == [{"M": 1024, "N": 1024, "K": 1024}]


def test_a_partial_pass_says_how_many_cases_and_that_the_rest_need_a_gpu() -> None:
    res = CheckResult("ch08_wgmma", "t", "f.cu", compiled=True, passed=True, run_status="ok",
                      established="cpu-emulation", cases_run=2, cases_total=3)
    assert res.verdict == "PASSED on 2 of 3 cases; the rest need a GPU"
    assert res.messages[-1] == res.verdict
    res.cases_run = res.cases_total = 0
    assert res.verdict == "PASSED"


def test_a_partial_pass_counts_the_cases_of_the_other_builds_too() -> None:
    """Chapter 11's check also runs its d = 64 build: its cases are the check's, in the count and the GPU's share."""
    from types import SimpleNamespace

    from tklab.grading.judge import annotate_emulated

    spec = specs.get("ch11_flash_bwd")
    assert spec.builds, "chapter 11's check runs another build"
    res = CheckResult(spec.id, "t", "f.cu", compiled=True, passed=True, run_status="ok",
                      established="cpu-emulation")
    annotate_emulated(res, SimpleNamespace(result={}, status="ok"), spec)
    own = [spec, *spec.builds]
    run = sum(len({tuple(emu_cases.shape(d).items()) for d in emu_cases.cases(b)}) for b in own)
    left = sum(len(emu_cases.left_to_gpu(b)) for b in own)
    assert (res.cases_run, res.cases_total) == (run, run + left)
    main = len({tuple(emu_cases.shape(d).items()) for d in emu_cases.cases(spec)})
    assert res.cases_run > main  # the d = 64 build's cases were left out before


def test_the_overlap_floor_names_the_overlap() -> None:
    floor = specs.get("ch10_flash").floors[0]
    assert floor.judge_emulated({}) is None  # an emulator that does not count: nothing judged
    assert floor.judge_emulated({"max_wgmma_groups": 2}).ok
    bad = floor.judge_emulated({"max_wgmma_groups": 1})
    assert not bad.ok and "overlap" in bad.name and "mma_async_wait<1>" in bad.detail
    assert floor.judge_gpu({"reference_ratio": 0.62}).ok is False
    assert floor.judge_gpu({"reference_ratio": 0.97}).ok
    res = CheckResult("ch10_flash", "t", "f.cu", compiled=True, passed=False, run_status="ok",
                      established="cpu-emulation", floors=[bad])
    assert res.summary.startswith("S_j / P·V_{j-1} overlap: at most 1 wgmma group")


@pytest.mark.nvrtc  # a (stand-in) GPU run is compiled by NVRTC; without it the check is emulated from the start
@pytest.mark.skipif(__import__("tklab").gpu.available(), reason="a real GPU is here (its twin runs the real thing)")
def test_a_gpu_pass_is_failed_by_the_emulators_hazard_analysis(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The GPU run is stood in (it passes, as a race can by timing luck on the H200); the hazard run beside it
    is real: the ch08 loop that waits for its wgmma groups once, after the loop, fails, the solution passes,
    and the report names both pieces of evidence."""
    import planted

    import tklab.grading.check as chk
    from tklab.grading import runner
    from tklab.grading.verdict import Evidence

    if not emu_cases.can_run(specs.get("ch08_wgmma")):
        pytest.skip("no C++ compiler for the emulator")
    real = runner.run_isolated
    for exercise_id in specs.all_ids():  # the specs size their launches for this machine: before the stand-in
        specs.get(exercise_id)

    def gpu_stand_in(exercise_id, path, *, mode, **kw):
        if mode == "gpu":
            return judge.RunOutcome("ok", "correct", {"cases": [], "device": "Fake GPU"}, evidence=Evidence.GPU)
        return real(exercise_id, path, mode=mode, **kw)

    monkeypatch.setattr(runner, "run_isolated", gpu_stand_in)
    monkeypatch.setattr(chk.gpu, "available", lambda: True)
    monkeypatch.setattr(chk.gpu, "arch", lambda: "sm_90a")  # a Hopper stand-in (tklab.grading.route asks it)
    spec = specs.get("ch08_wgmma")
    good = chk.check("ch08_wgmma", planted.ROOT / spec.solution, bench=False)
    assert good.passed is True and good.hazards is not None and good.hazards.ok, good
    assert "Fake GPU" in good.evidence and "hazard analysis" in good.evidence
    late = next(m for m in planted.load("ch08_wgmma") if m.name == "wait_once_after_the_loop")
    bad = chk.check("ch08_wgmma", planted.mutated_file(late, tmp_path), bench=False)
    assert bad.passed is False and bad.run_status == "ok" and not bad.hazards.ok, bad
    assert bad.summary.startswith("hazard analysis (CPU emulator)")


def test_the_reference_solution_reaches_the_child_as_a_compiled_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """A concept floor's yardstick on a GPU: the parent compiles the hidden solution and hands the child its
    compile-cache entry by key; the child rebuilds the kernel from it (no source, no GPU needed to look)."""
    from tklab.grading import child

    spec = specs.get("ch10_flash")
    keys: list[str] = []
    env = running._reference(spec, "sm_90a", keys)
    assert env[child.REFERENCE_VARIABLE] == keys[0]
    monkeypatch.setenv(child.REFERENCE_VARIABLE, keys[0])
    kernel = child._reference_kernel(spec, "sm_90a")
    assert kernel is not None and kernel.module.source == "" and len(kernel.module.cubin) > 0
    assert running._reference(specs.get("ch08_wgmma"), "sm_90a", []) == {}  # no floor: nothing compiled


def test_the_report_says_where_the_code_ran_in_plain_words() -> None:
    """The sandbox's jargon (uids, namespaces, rlimits) stays in ``.isolation`` and --json; the report says
    what it means for the learner (issue 31)."""
    from tklab.grading.verdict import CheckResult

    detail = ("bubblewrap sandbox (read-only filesystem except a fresh folder, no network, own PID namespace), as "
              "nobody (uid 65534); limits: 60 s wall clock")
    res = CheckResult("ch02_smem_tiling", "Shared-memory tiling", "x.cu", compiled=True, passed=True,
                      run_status="ok", isolation=detail)
    text = repr(res)
    assert "where it ran: in a sandbox" in text and "uid" not in text and "namespace" not in text
    assert res.to_dict()["isolation"] == detail
    res.isolation = "separate process (fresh folder, clean environment, own session), as root (uid 0)"
    assert "crash or a hang cannot take your notebook down" in repr(res) and "uid" not in repr(res)


def test_the_mismatch_grid_scrolls_instead_of_wrapping_inside_numbers() -> None:
    """JupyterLab wraps <pre> text: the report's grid of numbers must keep its lines whole (issue 31)."""
    from tklab.grading.verdict import CheckResult

    res = CheckResult("ch02_smem_tiling", "Shared-memory tiling", "x.cu", compiled=True, passed=False,
                      run_status="wrong", run_message="wrong result",
                      mismatch={"output": "C", "index": [0, 1], "got": 1.25, "expected": 0.5, "wrong": 3, "total": 4,
                                "window": {"origin": [0, 0], "matrix": True, "got": [[1.0, 1.25], [0.0, 1.0]],
                                           "expected": [[1.0, 0.5], [0.0, 1.0]],
                                           "bad": [[False, True], [False, False]]}})
    page = res._repr_html_()
    assert "<pre style='white-space:pre;overflow-x:auto" in page and "1.25*" in page


def test_an_uncoalesced_ch01_order_passes_with_a_remark_where_only_the_simulator_runs(tmp_path) -> None:
    """``row, col = cuda.grid(2)`` computes the right C (square shapes) but no warp access coalesces: the
    simulator cannot time it, so the report says it in words (issue 31); the coalesced order gets no remark."""
    import planted

    uncoalesced_order = specs.module("ch01_naive_matmul").uncoalesced_order

    right = (planted.ROOT / "solutions" / "ch01_naive_matmul" / "ch01_naive_matmul.py").read_text()
    swapped = right.replace(answer("ch01_naive_matmul", "cuda.grid"), "row, col = cuda.grid(2)")
    assert swapped != right
    assert uncoalesced_order(right) is None
    remark = uncoalesced_order(swapped)
    assert remark and "coalesce" in remark and "C[row, col]" in remark
    assert uncoalesced_order(swapped.replace("C[row, col]", "C[col, row]")) is None  # x on C's columns again
    from tklab.grading.check import check

    f = tmp_path / "ch01_naive_matmul.py"
    f.write_text(swapped)
    assert any("none coalesce" in n for n in check("ch01", f, run=False).notes)


def test_a_nan_the_kernel_wrote_is_told_apart_from_an_element_it_never_wrote() -> None:
    """The checker fills outputs with a NaN whose payload no arithmetic makes: an element still holding it was never
    written; any other NaN was computed (from shared memory no thread filled, say) and written."""
    from tklab.run.arrays import poisoned, to_bf16_bits, unwritten

    expected = np.ones((4, 8), np.float32)
    for dtype in (np.float32, np.float64, np.uint16):
        got = poisoned(np, (4, 8), dtype)
        assert np.isnan(got.astype(np.float64) if dtype != np.uint16 else bf16_to_float32(got)).all()
        assert unwritten(got).all()
        ones = to_bf16_bits(np.ones(4, np.float32)) if dtype == np.uint16 else np.ones(4, dtype)
        nans = to_bf16_bits(np.full(2, np.nan, np.float32)) if dtype == np.uint16 else np.full(2, np.nan, dtype)
        got[0, :4] = ones
        got[1, :2] = nans  # computed NaN: canonical bits
        got[1, 2] = (np.zeros(1, dtype) / np.zeros(1, dtype))[0] if dtype != np.uint16 else 0xFFFF
        m = compare("C", got, expected.astype(np.float64), 1e-3, 1e-3)
        assert m["unwritten"] == 32 - 4 - 3 and m["nan_written"] == 3, (dtype, m)
