"""The pipeline timeline of chapter 07: the ring model obeys its own rules, its steady state is the closed
formula, the picture is drawn from the model (read back through data-* attributes), and the explorer redraws."""

from __future__ import annotations

import base64
import io
import itertools
import re

import pytest
from PIL import Image

from tklab.widgets import pipeline as p
from tklab.widgets.explorers import STATIC_SCALE
from tklab.widgets.raster import stacked_png, svg_size


def _marks(svg: str, cls: str) -> list[dict[str, str]]:
    found = re.findall(rf'<(?:rect|circle) class="{cls}" ([^>]*)>', svg)
    return [dict(re.findall(r'([\w-]+)="([^"]*)"', m)) for m in found]


PARAMS = list(itertools.product((1, 2, 3, 5), (0.0, 1.5), (0.0, 0.4), (0.0, 1.0), (0.0, 0.3)))


@pytest.mark.parametrize(("stages", "latency", "consume", "transfer", "issue"), PARAMS)
def test_the_ring_obeys_its_rules(stages, latency, consume, transfer, issue) -> None:
    if latency + consume + transfer + issue == 0:
        pytest.skip("all-zero times are refused (tested below)")
    tl = p.simulate(stages, latency, consume, transfer, issue, tiles=40)
    t = tl.tiles
    for i, x in enumerate(t):
        assert (x.stage, x.lap) == (i % stages, i // stages)
        assert x.land >= x.issue + latency - 1e-12 and x.start >= x.land and x.end == pytest.approx(x.start + consume)
        if i >= stages:  # the producer never refills a stage before the consumer released it
            assert x.issue >= t[i - stages].end - 1e-12
        if i:  # in order: one producer, one memory pipe, one consumer
            assert x.issue >= t[i - 1].issue + issue - 1e-12
            assert x.land >= t[i - 1].land + transfer - 1e-12
            assert x.start >= t[i - 1].end - 1e-12
    # Each bound is reached by some event: a tile is only late because of one of the rules.
    assert t[0].issue == 0.0 and t[0].land == pytest.approx(latency)


@pytest.mark.parametrize(("stages", "latency", "consume", "transfer", "issue"), PARAMS)
def test_steady_state_is_the_largest_cycle(stages, latency, consume, transfer, issue) -> None:
    if latency + consume + transfer + issue == 0:
        pytest.skip("all-zero times are refused")
    tl = p.simulate(stages, latency, consume, transfer, issue, tiles=240)
    assert tl.period == pytest.approx(p.steady_period(stages, latency, consume, transfer, issue), rel=1e-9, abs=1e-12)


def test_more_stages_help_until_another_bound_takes_over() -> None:
    gbps = p.sweep((1, 2, 3, 4, 6, 8), latency=3.0, consume=0.3, transfer=1.0)
    values = [gbps[s] for s in sorted(gbps)]
    assert values == sorted(values)  # never worse with more stages
    assert values[0] < values[1] < values[2]  # latency-bound: each stage adds bytes in flight
    assert values[-1] == values[-2] == values[-3]  # bandwidth-bound: flat
    assert p.simulate(1, 3.0, 0.3, 1.0).limiter == "latency-bound"
    assert p.simulate(8, 3.0, 0.3, 1.0).limiter == "bandwidth-bound"
    assert values[-1] == pytest.approx(2 * 16384 * 132 / 1e-6 / 1e9)  # one stage per µs per SM, read + write


def test_phase_parities_alternate_per_lap() -> None:
    rows = p.phase_table(stages=3, tiles=7)
    assert [r["consumer waits full parity"] for r in rows] == [0, 0, 0, 1, 1, 1, 0]
    assert [r["producer waits empty parity"] for r in rows] == [1, 1, 1, 0, 0, 0, 1]
    assert [r["stage"] for r in rows] == [0, 1, 2, 0, 1, 2, 0]
    tl = p.simulate(3, 1.0, 0.5, tiles=7)
    assert [(t.full_parity, t.empty_parity) for t in tl.tiles] == [(r["consumer waits full parity"],
                                                                    r["producer waits empty parity"]) for r in rows]


def test_timeline_svg_is_the_model() -> None:
    tl = p.simulate(2, 1.5, 0.4, 0.6, 0.05, tiles=10)
    svg = p.timeline_svg(tl, title="demo")
    assert svg.startswith("<svg") and svg.endswith("</svg>") and "demo" in svg
    assert p.timeline_svg(tl, title="demo") == svg  # deterministic
    loads, uses = _marks(svg, "load"), _marks(svg, "use")
    assert len(loads) == len(uses) == len(_marks(svg, "busy")) == len(_marks(svg, "issue")) == 10
    for m, t in zip(loads, tl.tiles, strict=True):
        assert (int(m["data-item"]), int(m["data-stage"]), int(m["data-lap"]), int(m["data-parity"])) == \
            (t.i, t.stage, t.lap, t.lap % 2)
        assert float(m["data-start"]) == pytest.approx(t.issue, abs=1e-5)
        assert float(m["data-end"]) == pytest.approx(t.land, abs=1e-5)
    for m, t in zip(uses, tl.tiles, strict=True):
        assert float(m["data-start"]) == pytest.approx(t.start, abs=1e-5)
    fulls = _marks(svg, "full")  # drawn only where a full stage waits for the consumer
    assert len(fulls) == sum(t.start > t.land for t in tl.tiles)
    assert f"a tile every {tl.period:.3g} µs ({tl.limiter})" in svg


def test_sweep_svg_shows_model_measured_and_ceiling() -> None:
    model = p.sweep((1, 2, 4), 1.5, 0.3, 1.0)
    svg = p.sweep_svg(model, {1: 1500.0, 4: 3900.0}, ceiling=4300.0)
    assert [int(m["data-stages"]) for m in _marks(svg, "model")] == [1, 2, 4]
    assert [float(m["data-gbps"]) for m in _marks(svg, "measured")] == [1500.0, 3900.0]
    assert 'class="ceiling" data-gbps="4300"' in svg
    assert "measured" not in p.sweep_svg(model).split("stages")[-1]  # no legend entry without measurements


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"stages": 0, "latency": 1, "consume": 1}, "stages must be"),
    ({"stages": 2, "latency": -1, "consume": 1}, "negative"),
    ({"stages": 2, "latency": 0, "consume": 0}, "must be positive"),
    ({"stages": 2, "latency": 1, "consume": 1, "tiles": 0}, "tiles must be"),
])
def test_bad_parameters_say_what_is_wrong(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        p.simulate(**kwargs)


def test_explorer_redraws_and_reports_errors() -> None:
    ex = p.pipeline_explorer(stages=1, latency=1.5, consume=0.3, transfer=1.0, measured={1: 1500.0}, ceiling=4300.0)
    assert "latency-bound" in ex.status.value and len(_marks(ex.figure.value, "load")) == 12
    first = ex.figure.value
    ex.stages.value = 4
    assert "bandwidth-bound" in ex.status.value and ex.figure.value != first
    assert {int(m["data-stage"]) for m in _marks(ex.figure.value, "load")} == {0, 1, 2, 3}
    assert _marks(ex.figure.value, "measured")[0]["data-gbps"] == "1500"
    for name in ("latency", "consume", "transfer", "issue"):
        getattr(ex, name).value = 0.0
    assert ex.error and "must be positive" in ex.status.value and ex.figure.value == ""
    ex.consume.value = 0.5
    assert ex.error is None and "consumer-bound" in ex.status.value

    # The stored copy (a fresh clone shows no widget view, and no SVG until trusted) is one PNG: the
    # timeline with the sweep below it, at the drawings' on-screen size, redrawn when a control moves.
    data, meta = ex._repr_mimebundle_()
    assert "text/html" not in data and "application/vnd.jupyter.widget-view+json" in data
    timeline, sweep_chart = re.findall(r"<svg\b.*?</svg>", ex.figure.value)
    (tw, th), (sw, sh) = svg_size(timeline), svg_size(sweep_chart)
    assert meta["image/png"]["width"] == round(max(tw, sw)) and meta["image/png"]["height"] > round(th + sh)
    png = base64.b64decode(data["image/png"])
    width, height = _png_size(png)
    assert width == round(max(tw, sw) * STATIC_SCALE) and abs(height - meta["image/png"]["height"] * STATIC_SCALE) <= 1
    ex.stages.value = 1
    assert base64.b64decode(ex._repr_mimebundle_()[0]["image/png"]) != png


def test_stacked_drawings_keep_their_places() -> None:
    """Two drawings stacked into one PNG: each one's colour where its drawing put it, white beside the
    narrower one."""
    def block(width: int, colour: str) -> str:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="20">'
                f'<rect x="0" y="0" width="{width}" height="20" fill="{colour}"/></svg>')

    png, (width, height) = stacked_png([block(100, "#ff0000"), block(50, "#0000ff")], scale=2, gap=10)
    assert (width, height) == (100, 50)
    with Image.open(io.BytesIO(png)) as im:
        rgb = im.convert("RGB")
        assert rgb.size == (200, 100)
        assert rgb.getpixel((150, 20)) == (255, 0, 0)  # the first drawing, full width
        assert rgb.getpixel((50, 80)) == (0, 0, 255)  # the second, below the gap
        assert rgb.getpixel((150, 80)) == (255, 255, 255)  # beside the narrower one
    with pytest.raises(ValueError, match="no drawings"):
        stacked_png([])


def _png_size(png: bytes) -> tuple[int, int]:
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
