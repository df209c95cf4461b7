"""The block map, the traffic model and the warpgroup schedule model of chapters 09-10, and their pictures."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tklab import attention, schedules
from tklab.widgets import attention_view as view


def test_block_map_skips_what_a_causal_mask_hides():
    m = attention.block_map(300, 128, 64, causal=True)
    assert m.shape == (3, 5)
    assert m.tolist() == [[2, 2, 0, 0, 0], [1, 1, 2, 2, 0], [1, 1, 1, 1, 2]]
    full = attention.block_map(256, 128, 64)
    assert (full == attention.FULL).all()


@pytest.mark.parametrize("n,br,bc", [(8192, 128, 64), (4096, 192, 128), (1000, 128, 176)])
def test_causal_visits_about_half_of_the_blocks(n, br, bc):
    m = attention.block_map(n, br, bc, causal=True)
    visited = (m != attention.SKIPPED).mean()
    assert 0.5 <= visited <= 0.5 + (br + bc) / n + 0.01  # half, plus the diagonal band


def test_traffic_model_counts_scores_and_streamed_blocks():
    t = attention.traffic(1, 1, 1024, 128, block_rows=128, block_keys=64)
    assert t["flash_hbm"] == 4 * 1024 * 128 * 2
    assert t["naive_hbm"] == t["flash_hbm"] + 8 * 1024 * 1024
    assert t["blocks_visited"] == 8 * 16
    assert t["flash_l2"] == 8 * 16 * 64 * 128 * 2 * 2 + 2 * 1024 * 128 * 2
    causal = attention.traffic(1, 1, 1024, 128, block_rows=128, block_keys=64, causal=True)
    assert causal["blocks_visited"] == sum(2 * (i + 1) for i in range(8))  # query block i sees 2(i+1) key blocks
    assert causal["flash_l2"] == 72 * 64 * 128 * 2 * 2 + 2 * 1024 * 128 * 2


def test_block_map_picture_has_one_cell_per_block_coloured_by_state():
    svg = view.block_map_svg(300, 128, 64, True)
    cells = re.findall(r'class="block" data-q="(\d+)" data-k="(\d+)" data-state="([^"]+)"', svg)
    assert len(cells) == 15
    states = {(int(q), int(k)): s for q, k, s in cells}
    assert states[(0, 2)] == "skipped" and states[(2, 0)] == "computed"
    assert states[(0, 0)].startswith("computed, partly")
    assert svg == view.block_map_svg(300, 128, 64, True)  # deterministic


def test_ping_pong_keeps_the_tensor_cores_busier_than_lock_step():
    plain, overlap, pp = (schedules.simulate(s, blocks=8, softmax=1.0) for s in schedules.SCHEDULES)
    assert pp.tensor_busy > 0.95
    assert plain.tensor_busy < overlap.tensor_busy < pp.tensor_busy
    assert pp.end < overlap.end < plain.end


def test_schedule_model_does_every_block_once():
    for s in schedules.SCHEDULES:
        tl = schedules.simulate(s, blocks=4, groups=2)
        for g in (0, 1):
            labels = sorted(x.label for x in tl.spans if x.group == g)
            assert labels == sorted([f"S{j}" for j in range(4)] + [f"PV{j}" for j in range(4)] +
                                    [f"X{j}" for j in range(4)])
        # a product's softmax never starts before the product is done
        for g in (0, 1):
            spans = {x.label: x for x in tl.spans if x.group == g}
            for j in range(4):
                assert spans[f"X{j}"].start >= spans[f"S{j}"].end - 1e-9
                assert spans[f"PV{j}"].start >= spans[f"X{j}"].end - 1e-9


def test_ping_pong_runs_products_whole_one_after_another():
    tl = schedules.simulate("ping-pong", blocks=3)
    products = sorted((x for x in tl.spans if x.unit == "tensor"), key=lambda x: x.start)
    for a, b in zip(products, products[1:], strict=False):
        assert b.start >= a.end - 1e-9, (a, b)


def test_schedule_model_refuses_nonsense():
    with pytest.raises(ValueError, match="schedule must be"):
        schedules.simulate("fast")
    with pytest.raises(ValueError, match="greater than zero"):
        schedules.simulate("plain", gemm=0)
    with pytest.raises(ValueError, match="two warpgroups"):
        schedules.simulate("ping-pong", groups=1)


def test_timeline_picture_shows_every_span_in_its_row():
    tl = schedules.simulate("overlap", blocks=3)
    svg = view.timeline_svg(tl)
    spans = re.findall(r'class="span" data-group="(\d)" data-unit="(\w+)" data-label="(\w+)" '
                       r'data-start="([\d.]+)" data-end="([\d.]+)"', svg)
    assert len(spans) == len(tl.spans)
    assert {(int(g), u, lab) for g, u, lab, _, _ in spans} == {(s.group, s.unit, s.label) for s in tl.spans}
    assert f"{tl.tensor_busy:.0%}" in svg


def test_explorers_redraw_when_a_control_moves():
    pytest.importorskip("ipywidgets")
    b = view.blocks_explorer(seq=300, causal=True)
    before = b.figure.value
    b.children[0].children[1].value = False  # causal off
    assert b.figure.value != before and "skipped: 0" in b.figure.value
    s = view.schedule_explorer()
    before = s.figure.value
    s.children[0].children[0].value = 2.0  # softmax twice as long as a product
    assert s.figure.value != before
    assert np.isfinite(len(s.figure.value))


def _overlapping(boxes: list[tuple[float, float, float, float]]) -> list[tuple[int, int]]:
    return [(i, j) for i, a in enumerate(boxes) for j, b in enumerate(boxes[:i])
            if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]]


@pytest.mark.parametrize("schedule", schedules.SCHEDULES)
def test_the_schedule_picture_hides_no_box_and_overlaps_no_label(schedule: str) -> None:
    """S_j and P·V_{j-1} run at once in the overlapped schedules: each is drawn in a row of its own, so neither
    hides the other, and a label is drawn only inside a box it fits (no two labels overlap), at every setting
    the explorer offers."""
    from tklab.widgets.draw import outside, text_boxes

    checked = 0
    for softmax in (0.25, 1.0, 3.0):
        for stagger in (0.0, 0.75, 2.0):
            for latency in (0.0, 0.25, 1.0):
                tl = schedules.simulate(schedule, blocks=5, softmax=softmax, stagger=stagger, latency=latency)
                svg = view.timeline_svg(tl, scale=600 / tl.end)
                labels = text_boxes(svg)
                clash = _overlapping([b[1:] for b in labels])
                assert not clash, [(labels[i][0], labels[j][0]) for i, j in clash]
                rects = [tuple(float(v) for v in m) for m in re.findall(
                    r'class="span"[^>]* x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"', svg)]
                assert len(rects) == len(tl.spans)
                hidden = _overlapping([(x, y, x + w, y + h) for x, y, w, h in rects])
                assert not hidden, (softmax, stagger, latency, hidden[:2])
                assert outside(svg) == []
                checked += 1
    overlap = schedules.simulate(schedule, blocks=5)
    both = [(s, p) for s in overlap.spans for p in overlap.spans if s.group == p.group and s.label[0] == "S"
            and p.label.startswith("PV") and s.start < p.end and p.start < s.end]
    assert bool(both) == (schedule == "overlap")  # the picture's point: products in flight together
    assert checked == 27
