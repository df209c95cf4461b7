"""bench/train_tiny_gpt.py on the CPU: the deviations it judges (the criterion, the SDPA-vs-SDPA control, the second
reading, the spread over seeds) on synthetic loss curves whose answers are known, the report it writes, its
arguments, and its refusal without a GPU. The training itself needs an H100/H200."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest
from scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
PLATEAU, AFTER, DROP, STEPS = 1.4, 0.5, 78, 300


def _bench() -> ModuleType:
    sys.path.insert(0, str(ROOT))
    return load_script(ROOT / "bench" / "train_tiny_gpt.py", "train_tiny_gpt_bench")


tg = _bench()


def _escape(shift: int) -> list[float]:
    """A plateau at 1.4 nats that drops to 0.5 at step DROP + shift: the escape only moved in time."""
    return [PLATEAU if s < DROP + shift else AFTER for s in range(STEPS)]


def _run(label: str, loss: list[float], ms: float = 10.0) -> dict:
    return {"attention": label, "loss": loss, "step_ms": [100.0] * 5 + [ms] * (len(loss) - 5)}


def test_smooth_is_a_trailing_mean_that_starts_short() -> None:
    assert np.allclose(tg.smooth([1, 2, 3, 4], 2), [1, 1.5, 2.5, 3.5])
    assert np.allclose(tg.smooth([0] * 10 + [1] * 10)[9:], [0] + [i / 10 for i in range(1, 11)])


def test_an_escape_moved_by_k_steps_deviates_by_k_tenths_of_the_drop() -> None:
    """A step moved by k <= 10 steps: per step |a - b| is the whole drop on k steps; the 10-step averages differ by
    k/10 of it, most on the steps after both have dropped (the first: DROP + k + ... -> the window's first step)."""
    for k in (1, 2, 5):
        c = tg.compare(_escape(k), _escape(0))
        assert c["max_abs_deviation"] == pytest.approx(PLATEAU - AFTER)
        assert c["max_abs_deviation_smoothed"] == pytest.approx(k * (PLATEAU - AFTER) / 10)
        assert DROP + k - 1 <= c["step_of_max_smoothed"] <= DROP + 9
        assert c["signed_smoothed_at_max"] > 0  # the later escape is the higher curve
        assert c["mean_abs_deviation_last50"] == 0
    assert tg.compare(_escape(0), _escape(2))["signed_smoothed_at_max"] < 0


def test_a_constant_bias_reads_the_same_raw_smoothed_and_at_the_end() -> None:
    base = np.linspace(2, 0.5, STEPS)
    c = tg.compare(base + 0.03, base)
    assert c["max_abs_deviation"] == pytest.approx(0.03)
    assert c["max_abs_deviation_smoothed"] == pytest.approx(0.03)
    assert c["mean_abs_deviation_last50"] == pytest.approx(0.03)
    with pytest.raises(ValueError):
        tg.compare([1.0, 2.0], [1.0])


def test_the_criterion_is_unchanged_and_the_control_is_a_second_reading() -> None:
    """The course's escape 1 step late, the control's 2 steps: the course fails the 0.05 criterion (0.09) but lies
    within the control (0.18); agree never reads the control."""
    course, sdpa, control = _run("course", _escape(1), 22.0), _run("sdpa", _escape(0), 13.0), \
        _run("sdpa:cudnn", _escape(2), 14.0)
    s = tg.summarize(course, sdpa, control, tolerance=0.05)
    # the keys the notebook and the chapter claims read, first and as before
    assert list(s)[:7] == ["max_abs_deviation", "max_abs_deviation_smoothed", "mean_abs_deviation_last50",
                           "tolerance_smoothed", "agree", "final_loss", "median_step_ms"]
    assert s["max_abs_deviation_smoothed"] == pytest.approx(0.09) and s["agree"] is False
    assert s["median_step_ms"] == {"course": 22.0, "sdpa": 13.0, "sdpa:cudnn": 14.0}
    assert s["final_loss"]["course"] == pytest.approx(AFTER)
    assert s["control"]["pair"] == "sdpa vs sdpa:cudnn"
    assert s["control"]["max_abs_deviation_smoothed"] == pytest.approx(0.18)
    assert s["control"]["signed_smoothed_at_max"] < 0  # sdpa escaped first
    second = s["second_reading"]
    assert "not the criterion" in second["what"]
    assert second["within_control"] is True
    assert second["course_vs_sdpa_smoothed"] == pytest.approx(0.09)
    assert second["control_smoothed"] == pytest.approx(0.18)
    # the other way round: the course further out than the control
    s2 = tg.summarize(_run("course", _escape(3)), sdpa, _run("sdpa:cudnn", _escape(1)), tolerance=0.05)
    assert s2["second_reading"]["within_control"] is False and s2["agree"] is False
    # within the tolerance whatever the control says
    s3 = tg.summarize(_run("course", _escape(0)), sdpa, _run("sdpa:cudnn", _escape(0)), tolerance=0.05)
    assert s3["agree"] is True and s3["max_abs_deviation_smoothed"] == 0


def test_the_spread_over_seeds() -> None:
    sdpa = _run("sdpa", _escape(0))
    shifts = [(1, 2), (3, 1), (2, 4)]  # (course, control) escapes per seed: 0.09/0.18, 0.27/0.09, 0.18/0.36
    per_seed = [{"seed": i, "summary": tg.summarize(_run("course", _escape(c)), sdpa, _run("sdpa:cudnn", _escape(k)),
                                                   tolerance=0.05)} for i, (c, k) in enumerate(shifts)]
    sp = tg.seed_spread(per_seed)
    assert sp["seeds"] == [0, 1, 2]
    assert np.allclose(sp["course_vs_sdpa_smoothed"], [0.09, 0.27, 0.18])
    assert np.allclose(sp["control_smoothed"], [0.18, 0.09, 0.36])
    assert sp["course_vs_sdpa_spread"] == pytest.approx({"min": 0.09, "median": 0.18, "max": 0.27})
    assert sp["control_spread"] == pytest.approx({"min": 0.09, "median": 0.18, "max": 0.36})
    assert sp["agree_count"] == 0 and sp["within_control_count"] == 2
    assert sp["course_max_within_control_max"] is True


def test_auto_control_never_repeats_sdpas_own_choice() -> None:
    assert tg.control_candidates("FLASH_ATTENTION") == ["cudnn", "efficient"]
    assert tg.control_candidates("CUDNN_ATTENTION") == ["flash", "efficient"]
    assert tg.control_candidates("EFFICIENT_ATTENTION") == ["cudnn", "flash"]
    assert tg.control_candidates("MATH")[0] == "cudnn"


def _profile(kernels: list[tuple[str, float, int]], rest: float = 0.0, rest_attention: float = 0.0) -> dict:
    """``totals``' dict; ``rest``: µs of kernels past the 40 it lists (``rest_attention`` of them attention's)."""
    return {"steps": 5, "wall_ms_per_step": 21.0, "step_cpu_us": 5 * 20_000.0,
            "attention_cpu_us": {"forward": 5 * 4_000.0, "backward": 5 * 6_000.0},
            "attention_calls": ["FlashAttentionBackward"],
            "kernel_us": sum(us for _, us, _ in kernels) + rest,
            "attention_kernel_us": sum(us for n, us, _ in kernels if tg.ATTENTION_KERNEL.search(n)) + rest_attention,
            "kernels": [{"name": n, "us": us, "calls": c} for n, us, c in kernels]}


def test_profile_digest_is_per_step_and_finds_attentions_kernels() -> None:
    p = _profile([("sm90_xmma_gemm_bf16", 5 * 1500.0, 60), ("flash_fwd", 5 * 100.0, 20),
                  ("flash_bwd_prep", 5 * 50.0, 20), ("cudnn_generated_fort_native_sdpa_sm90", 5 * 10.0, 1)],
                 rest=5 * 200.0, rest_attention=5 * 20.0)
    d = tg.profile_digest(p, top=3)
    assert d["kernel_ms"] == pytest.approx(1.86) and d["attention_kernel_ms"] == pytest.approx(0.18)
    assert d["attention_cpu_fwd_ms"] == pytest.approx(4.0) and d["attention_cpu_bwd_ms"] == pytest.approx(6.0)
    assert d["rest_cpu_ms"] == pytest.approx(10.0)
    assert d["step_cpu_ms"] == pytest.approx(20.0) and d["wall_ms"] == 21.0
    assert [k["name"] for k in d["top"]] == ["sm90_xmma_gemm_bf16", "flash_fwd", "flash_bwd_prep"]
    assert [k["attention"] for k in d["top"]] == [False, True, True]
    assert d["top"][0]["calls_per_step"] == 12


def test_profile_totals_count_kernels_not_the_ranges_the_gpu_timeline_repeats() -> None:
    """key_averages as torch.profiler gives them (H200, torch 2.11): a record_function range and the optimizer's step
    are also GPU-side entries of their own name (user annotations); they are no kernels. Backward: the autograd
    engine's range of the attention's node."""
    cpu, gpu = "cpu", "cuda"

    def e(key: str, dev: str, cpu_us: float = 0.0, dev_us: float = 0.0, count: int = 1, ann: bool = False) -> Any:
        return SimpleNamespace(key=key, device_type=dev, cpu_time_total=cpu_us, self_device_time_total=dev_us,
                               count=count, is_user_annotation=ann)

    entries = [e("tiny_gpt.step", cpu, cpu_us=120_000), e("tiny_gpt.step", gpu, dev_us=119_000),
               e("Optimizer.step#AdamW.step", cpu, cpu_us=4_000), e("Optimizer.step#AdamW.step", gpu, dev_us=4_400),
               e("tiny_gpt.attention", cpu, cpu_us=11_000, count=20),
               e("tiny_gpt.attention", gpu, dev_us=700, ann=True),
               e("autograd::engine::evaluate_function: FlashAttentionBackward", cpu, cpu_us=22_000, count=20),
               e("autograd::engine::evaluate_function: AddmmBackward0", cpu, cpu_us=9_000, count=60),
               e("aten::mm", cpu, cpu_us=3_000, dev_us=1_500, count=60),
               e("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", gpu, dev_us=1_600, count=80),
               e("flash_bwd", gpu, dev_us=750, count=20), e("flash_fwd", gpu, dev_us=400, count=20)]
    t = tg.totals(entries, gpu, 5, [24.0, 25.0, 24.5, 30.0, 24.0])
    assert [k["name"] for k in t["kernels"]] == ["nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "flash_bwd",
                                                 "flash_fwd"]
    assert t["attention_cpu_us"] == {"forward": 11_000, "backward": 22_000}
    assert t["attention_calls"] == ["FlashAttentionBackward"]
    assert t["step_cpu_us"] == 120_000 and t["wall_ms_per_step"] == 24.5
    d = tg.profile_digest(t)
    assert d["kernel_ms"] == pytest.approx(0.55) and d["attention_kernel_ms"] == pytest.approx(0.23)
    assert d["attention_cpu_fwd_ms"] == pytest.approx(2.2) and d["attention_cpu_bwd_ms"] == pytest.approx(4.4)


def test_the_report_says_both_readings_and_keeps_the_runs_the_notebook_plots(tmp_path: Path) -> None:
    course, sdpa, control = _run("course", _escape(1)), _run("sdpa", _escape(0)), _run("sdpa:cudnn", _escape(2))
    summary = tg.summarize(course, sdpa, control, tolerance=0.05)
    per_seed = [{"seed": 0, "summary": summary},
                {"seed": 1, "summary": tg.summarize(_run("course", _escape(2)), sdpa, _run("sdpa:cudnn", _escape(1)),
                                                    tolerance=0.05)}]
    summary["seeds"] = tg.seed_spread(per_seed)
    meta = {"device": "synthetic", "date": "2026-12-05T00:00:00"}
    profiles = {"course": _profile([("flash_fwd", 500.0, 20)]), "sdpa": _profile([("flash_fwd_kernel", 400.0, 20)])}
    tg.write_report([tmp_path], "t", "2026-12-05", meta, summary, {"runs": [course, sdpa], "control_run": control},
                    profiles)
    data = json.loads((tmp_path / "t.json").read_text())
    assert [r["attention"] for r in data["runs"]] == ["course", "sdpa"]  # notebook 11 plots these two
    assert data["control_run"]["attention"] == "sdpa:cudnn" and set(data["profile"]) == {"course", "sdpa"}
    assert data["meta"]["date"] == meta["date"] and data["summary"]["agree"] is False
    md = (tmp_path / "t.md").read_text()
    assert "**agree = False**" in md and "0.0900 nats at step" in md
    assert "second, comparative reading; not the criterion" in md
    assert "| sdpa vs sdpa:cudnn (control) | 0.1800 |" in md
    assert "within the control (second reading): **True**" in md
    assert "Over 2 init-and-batch seeds" in md and "| 1 | 0.1800 | 0.0900 | False |" in md
    assert "## Profile (torch.profiler)" in md and "| CPU time inside attention forward calls | 4.00 | 4.00 |" in md
    assert "### Top CUDA kernels, course" in md
    # no profile, one seed: neither section
    one = tg.summarize(course, sdpa, control, tolerance=0.05)
    lines = "\n".join(tg.report_lines("2026-12-05", meta, one))
    assert "Profile" not in lines and "init-and-batch seeds" not in lines


def test_arguments() -> None:
    a = tg.parse_args([])
    assert (a.steps, a.seed, a.tolerance, a.control, a.seeds, a.profile, a.profile_steps) == \
        (300, 0, 0.05, "auto", 1, False, 5)
    a = tg.parse_args(["--seeds", "3", "--control", "rerun", "--profile", "--profile-steps", "2"])
    assert (a.seeds, a.control, a.profile, a.profile_steps) == (3, "rerun", True, 2)
    for bad in (["--seeds", "0"], ["--control", "math"], ["--steps", "-1"]):
        with pytest.raises(SystemExit):
            tg.parse_args(bad)


def test_without_a_gpu_it_refuses_clearly_before_any_work(capsys: pytest.CaptureFixture[str]) -> None:
    problem = tg.gpu_problem()
    if problem is None:
        pytest.skip("an sm_90 GPU is here: the bench would run")
    assert tg.main(["--steps", "1", "--profile"]) == 2
    err = capsys.readouterr().err
    assert "H100/H200" in err and err.strip() == problem
