"""The profile picture: every mark read back from the SVG must be the number the result holds.

Results come from the HAND-MADE ncu samples in tests/data/ncu/handmade (not measured; see the README).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from tklab.profile import ProfileResult, parse
from tklab.run.ceilings import H200_COPY_TBPS
from tklab.widgets import profile_view
from tklab.widgets.profile_view import DARK, LIGHT, profile_svg, roofline_axes, roofline_range

HANDMADE = Path(__file__).parent / "data" / "ncu" / "handmade"


def _result(name: str, flops: float | None = None, peak: str = "fp32_simt", **kw) -> ProfileResult:
    rec = parse.select(parse.parse_csv((HANDMADE / name).read_text()), kw.pop("kernel", None))
    return ProfileResult(kernel=rec.kernel, metrics=rec.metrics, device="NVIDIA H200", flops=flops, peak=peak,
                         grid=rec.grid, block=rec.block, **kw)


def _marks(svg: str, tag: str, cls: str) -> list[dict[str, str]]:
    return [dict(re.findall(r'([\w-]+)="([^"]*)"', m)) for m in re.findall(rf'<{tag} class="{cls}" ([^>]*)>', svg)]


def test_deterministic_and_well_formed() -> None:
    r = _result("smem_fp32_raw_base.csv", flops=2.0 * 4096**3)
    svg = profile_svg(r)
    assert svg == profile_svg(r) and svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count("<svg") == 1 and r.origin in svg.replace("&#x27;", "'")


def test_roofline_point_and_ceilings_are_the_results_numbers() -> None:
    r = _result("smem_fp32_raw_base.csv", flops=2.0 * 4096**3)
    svg = profile_svg(r)
    (point,) = _marks(svg, "circle", "kernel-point")
    assert float(point["data-intensity"]) == pytest.approx(r.intensity, rel=1e-3)
    assert float(point["data-tflops"]) == pytest.approx(r.tflops, rel=1e-3)
    roofs = {m["data-kind"]: m for m in _marks(svg, "line", "roof")}
    assert float(roofs["fp32_simt"]["data-tflops"]) == 51 and float(roofs["bf16_tensor"]["data-tflops"]) == 708
    assert float(roofs["dram"]["data-tbps"]) == H200_COPY_TBPS
    assert roofs["fp32_simt"]["stroke"] == DARK and roofs["bf16_tensor"]["stroke"] == LIGHT  # read against fp32
    # The point sits below the FP32 roof (8.8 < 51): a larger y in SVG coordinates.
    assert float(point["cy"]) > float(roofs["fp32_simt"]["y1"])
    # The roofs meet the bandwidth slope at the ridge point, x = peak / bandwidth.
    assert float(roofs["fp32_simt"]["x1"]) == pytest.approx(_x_of(svg, r, 51 / H200_COPY_TBPS), abs=0.11)


def _x_of(svg: str, r: ProfileResult, x: float) -> float:
    """Where the roofline panel puts FLOP/byte ``x``."""
    x0, x1, _, _ = profile_view.roofline_axes(r)
    return 48 + (math.log10(x) - x0) / (x1 - x0) * profile_view.ROOF_W


def test_a_faster_kernel_is_drawn_higher() -> None:
    slow = _result("smem_fp32_raw_base.csv", flops=2.0 * 4096**3)
    metrics = dict(slow.metrics, **{"gpu__time_duration.sum": slow.metrics["gpu__time_duration.sum"] / 2})
    fast = ProfileResult(kernel="k", metrics=metrics, device="NVIDIA H200", flops=slow.flops)
    (p_slow,), (p_fast,) = _marks(profile_svg(slow), "circle", "kernel-point"), _marks(profile_svg(fast), "circle",
                                                                                           "kernel-point")
    assert float(p_fast["data-tflops"]) == pytest.approx(2 * float(p_slow["data-tflops"]), rel=1e-3)
    assert roofline_axes(fast) == roofline_axes(slow)  # the default view holds both: same axes
    assert float(p_fast["cy"]) < float(p_slow["cy"])


def test_busy_bars_match_and_mark_the_limiter() -> None:
    r = _result("smem_fp32_raw_base.csv", flops=2.0 * 4096**3)
    bars = {m["data-unit"]: m for m in _marks(profile_svg(r), "rect", "busy")}
    assert set(bars) == set(r.units_busy())
    for unit, pct in r.units_busy().items():
        assert float(bars[unit]["data-pct"]) == pytest.approx(pct, abs=0.01)
    assert bars["shared memory"]["fill"] == DARK and bars["FMA pipe"]["fill"] == LIGHT
    assert float(bars["shared memory"]["width"]) > float(bars["L2"]["width"]) > float(bars["DRAM"]["width"])


def test_stall_bars_show_six_reasons_and_the_rest() -> None:
    r = _result("smem_fp32_raw_base.csv")
    bars = _marks(profile_svg(r), "rect", "stall")
    waiting = r.top_stalls(50)
    assert len(waiting) == 9 and len(bars) == 7
    assert [b["data-reason"] for b in bars[:6]] == [s.reason for s in waiting[:6]] and bars[6]["data-reason"] == "other"
    assert float(bars[6]["data-share"]) == pytest.approx(sum(s.share for s in waiting[6:]), abs=1e-4)
    assert sum(float(b["data-share"]) for b in bars) == pytest.approx(1.0, abs=1e-3)


def test_without_flops_or_traffic_there_is_no_point_but_a_hint() -> None:
    r = _result("transpose_two_kernels_raw_base.csv", kernel="transpose")
    svg = profile_svg(r)
    assert _marks(svg, "circle", "kernel-point") == [] and "pass flops= to place the kernel" in svg
    empty = ProfileResult(kernel="k", metrics={}, device="")
    svg = profile_svg(empty)
    assert "not reported" in svg and _marks(svg, "line", "roof") == []


def test_roofline_range_holds_every_point() -> None:
    x0, x1, y0, y1 = roofline_range([0.3, 165.0], [2.5e-3, 708.0])
    assert (x0, x1, y0, y1) == (-1, 3, -3, 3)
    assert roofline_range([5.0], [5.0]) == (0, 1, 0, 1)  # at least one decade each way
    tiny = _result("tiny_details.csv", flops=2.0 * 16**3, peak="bf16_tensor")
    x0, x1, y0, y1 = roofline_axes(tiny)
    assert 10.0**y0 <= tiny.tflops and 10.0**x0 <= tiny.intensity <= 10.0**x1 and (x0, x1, y1) == (-1, 3, 3)
