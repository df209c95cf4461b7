"""ProfileResult: the numbers derived from ncu's metrics, and the sentence naming the limiter.

Inputs are the HAND-MADE samples of tests/data/ncu/handmade (ncu's layout, invented numbers: see the
README there) and small metric dicts built here; expected values are computed from those inputs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tklab.profile import ProfileResult, parse
from tklab.profile.result import BOUND_PCT, M, read_here
from tklab.run.ceilings import H200_COPY_TBPS

HANDMADE = Path(__file__).parent / "data" / "ncu" / "handmade"
N = 4096


def _result(name: str, *, kernel: str | None = None, flops: float | None = None, peak: str = "fp32_simt",
            device: str = "NVIDIA H200") -> ProfileResult:
    rec = parse.select(parse.parse_csv((HANDMADE / name).read_text()), kernel)
    return ProfileResult(kernel=rec.kernel, metrics=rec.metrics, device=device, flops=flops, peak=peak,
                         grid=rec.grid, block=rec.block, live=False, date="2026-12-01", commit="abc1234",
                         ncu_version="2025.3.1.0", note="hand-made sample")


def test_shared_memory_bound_fp32_kernel() -> None:
    r = _result("smem_fp32_raw_base.csv", flops=2.0 * N**3)
    m = r.metrics
    assert r.ms == pytest.approx(15.620352)
    assert r.tflops == pytest.approx(2.0 * N**3 / 15.620352e-3 / 1e12)
    ffma_warps = m["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"] / 32
    assert r.ffma_instructions == ffma_warps
    assert r.shared_wavefronts == m["l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"]
    assert r.shared_wavefronts / ffma_warps == pytest.approx(1.5)
    assert r.shared_pct == m["l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed"]
    lim = r.limiter
    assert lim.kind == "shared"
    assert lim.sentence.startswith("shared-memory bound: the shared pipe is 87 % busy, 1.5 wavefronts per FFMA")
    assert "bank conflicts 0 % of wavefronts" in lim.sentence
    assert r.fma_pct == pytest.approx(24.8)  # the busier of the two FMA metrics
    assert r.occupancy_limit == ("warps", 2)  # registers also allow 2: warps is named first, as in models.occupancy
    assert r.dram_bytes == m["dram__bytes_read.sum"] + m["dram__bytes_write.sum"]
    assert r.intensity == pytest.approx(2.0 * N**3 / r.dram_bytes)


def test_counted_flops_stand_in_when_none_are_given() -> None:
    given = _result("smem_fp32_raw_base.csv", flops=2.0 * N**3)
    counted = _result("smem_fp32_raw_base.csv")
    assert counted.counted_flops == 2 * counted.metrics["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"]
    assert counted.tflops == pytest.approx(given.tflops)  # the sample's FFMA count is exactly 4096³
    assert counted.flops_source.startswith("counted by ncu") and given.flops_source == "given"
    assert any("FLOPs counted by ncu" in v for _, v in counted.rows())


def test_stall_reasons_in_order_with_shares_of_waiting_cycles() -> None:
    r = _result("smem_fp32_raw_base.csv")
    stalls = r.stalls
    assert r.stall_unit == "cycles per issued instruction"
    assert [s.reason for s in stalls[:3]] == ["mio_throttle", "short_scoreboard", "barrier"]
    assert all(a.value >= b.value for a, b in zip(stalls, stalls[1:], strict=False))
    waiting = [s for s in stalls if s.reason != "selected"]
    assert sum(s.share for s in waiting) == pytest.approx(1.0)
    assert "sleeping" not in [s.reason for s in stalls]  # zero: left out
    assert "selected" not in [s.reason for s in r.top_stalls(20)]
    assert stalls[0].share == pytest.approx(9.8 / sum(s.value for s in waiting))


def test_tensor_bound_gemm_with_op_specific_metric_and_sampled_stalls() -> None:
    r = _result("wgmma_raw_auto.csv", flops=2.0 * N**3, peak="bf16_tensor")
    assert M.tensor_pct[0] not in r.metrics and r.tensor_pct == pytest.approx(91.3)
    assert r.limiter.kind == "tensor"
    assert r.limiter.sentence == f"tensor-core bound: the tensor pipe is 91 % busy ({r.tflops:.0f} TFLOP/s)"
    assert r.stall_unit == "samples"
    reasons = [s.reason for s in r.stalls]
    assert "barrier_not_issued" not in reasons and reasons[0] == "wait"
    assert r.peak_tflops == 708.0 and r.copy_tbps == H200_COPY_TBPS
    assert "of the bf16 tensor ceiling (708)" in dict(r.rows())["compute"]


def test_dram_bound_transpose_and_computed_shared_utilisation() -> None:
    r = _result("transpose_two_kernels_raw_base.csv", kernel="transpose")
    m = r.metrics
    assert r.tflops is None and r.intensity is None
    assert r.dram_tbps == pytest.approx((m["dram__bytes_read.sum"] + m["dram__bytes_write.sum"]) / 156_992e-9 / 1e12)
    assert r.limiter.kind == "dram" and r.limiter.sentence.startswith("memory bound: DRAM is 74 % busy")
    # No ncu percentage for the shared pipe in this sample: wavefronts over (SMs × elapsed cycles).
    expected = 100 * (2_097_152 * 2) / (132 * 275_000)
    assert r.shared_pct == pytest.approx(expected)
    assert dict(r.rows())["compute"] == "— (pass flops= for a rate)"


def test_latency_bound_one_warp_kernel() -> None:
    r = _result("tiny_details.csv", flops=2.0 * 16**3, peak="bf16_tensor")
    assert r.stall_unit == "cycles per warp"
    s = r.limiter.sentence
    assert r.limiter.kind == "latency"
    assert s.startswith(f"latency bound: no unit reaches {BOUND_PCT:.0f} % busy (busiest: L2, 0 %)")
    assert "global memory (long scoreboard)" in s and "with 1 block the grid is under half a wave" in s


def _metrics(**pcts: float) -> dict[str, float]:
    names = {"tensor": M.tensor_pct[0], "fma": M.fma_pct[0], "shared": M.shared_pct[0], "dram": M.dram_pct[0],
             "l2": M.l2_pct[0], "issue": M.issue_pct[0]}
    return {names[k]: float(v) for k, v in pcts.items()}


@pytest.mark.parametrize(("pcts", "kind"), [
    ({"tensor": 70, "shared": 65, "dram": 20}, "tensor"),
    ({"tensor": 50, "shared": 65, "dram": 20}, "shared"),
    ({"fma": 88, "shared": 40}, "fma"),
    ({"l2": 75, "dram": 50}, "l2"),
    ({"fma": 30, "shared": 30, "issue": 85}, "issue"),
    ({"fma": 59.9, "issue": 79.9}, "latency"),  # both just under their thresholds
    ({}, "unknown"),
])
def test_the_busiest_unit_over_the_threshold_is_the_limiter(pcts: dict[str, float], kind: str) -> None:
    r = ProfileResult(kernel="k", metrics=_metrics(**pcts), device="NVIDIA H200")
    assert r.limiter.kind == kind


def test_low_occupancy_is_named_when_latency_bound() -> None:
    m = _metrics(fma=20) | {M.occupancy[0]: 12.0, M.waves[0]: 4.0}
    assert "only 12 % occupancy to hide it" in ProfileResult(kernel="k", metrics=m).limiter.sentence


def test_unknown_device_has_no_ceilings_but_still_a_verdict() -> None:
    r = _result("smem_fp32_raw_base.csv", flops=2.0 * N**3, device="")
    assert r.ceilings() is None and r.peak_tflops is None
    assert dict(r.rows())["compute"].startswith("8.8 TFLOP/s") and "ceiling" not in dict(r.rows())["compute"]
    assert r.limiter.kind == "shared"


def test_record_round_trip_keeps_the_verdict_and_labels_the_origin() -> None:
    r = _result("smem_fp32_raw_base.csv", flops=2.0 * N**3)
    r.keep = ("launch__grid_size",)
    back = ProfileResult.from_record("ch02.tiled_fp32", r.to_record(), note="this machine has no GPU")
    # A record keeps what the result reads, the stall reasons, and metrics asked for by name.
    assert back.metrics == {k: v for k, v in r.metrics.items() if read_here(k) or k == "launch__grid_size"}
    assert "device__attribute_display_name" in r.metrics and "device__attribute_display_name" not in back.metrics
    assert back.keep == ("launch__grid_size",) and "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio" \
        in back.metrics
    assert back.limiter == r.limiter and back.tflops == r.tflops and back.rows()[1:] == r.rows()[1:]
    assert not back.live and back.key == "ch02.tiled_fp32"
    assert back.origin == ("recorded on NVIDIA H200, 2026-12-01, commit abc1234, ncu 2025.3.1.0 "
                           "(this machine has no GPU)")


def test_text_and_notebook_views() -> None:
    r = _result("smem_fp32_raw_base.csv", flops=2.0 * N**3)
    text = str(r)
    assert r.limiter.sentence in text and r.origin in text and "smem_matmul" in text
    page = r._repr_html_()
    assert "<svg" not in page and page.count("<img") == 1 and "data:image/png;base64," in page  # shown untrusted
    assert "<b>shared-memory bound" in page and "recorded on NVIDIA H200" in page
    live = ProfileResult(kernel="k", metrics=r.metrics, device="NVIDIA H200", ncu_version="2025.3.1.0")
    assert live.origin == "measured now on NVIDIA H200, ncu 2025.3.1.0, --clock-control none"
