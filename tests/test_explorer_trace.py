"""The explorers draw a trace (issue 29): small hand-built traces with known answers -- a naive transpose's
column read is 32-way, the padded one is not; a strided load touches 32 sectors, a coalesced one 4; a one-stage
ring's consumers wait on every tile, a three-stage ring's do not; two warpgroups' wgmma groups overlap or take
turns. The numbers drawn are the bank model's, read back from the drawings' data-* attributes."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tklab.models import banks
from tklab.trace.model import Event, GlobalInstr, Sample, SharedInstr, Trace
from tklab.widgets import traced
from tklab.widgets.draw import outside


def _shared(line: int, offsets: list[int | None], *, op: str = "ld", executions: int = 8) -> SharedInstr:
    acc = banks.analyze(offsets, 4, store=op == "st")
    words = {(o // 4) % 32: set() for o in offsets if o is not None}
    for o in (o for o in offsets if o is not None):
        words[(o // 4) % 32].add(o // 4)
    ways = max(len(w) for w in words.values())
    return SharedInstr(line=line, text=f"tile[...] /* line {line} */", op=op, ptx=f"{op}.shared.b32", width=4,
                       executions=executions, wavefronts=executions * acc.wavefronts, ideal=executions * acc.ideal,
                       ways=ways, samples=(Sample(tuple(offsets), executions, acc.wavefronts),))


def _transpose(pad: int) -> Trace:
    """A 32x32 fp32 tile: rows written (lane = column), columns read (lane = row); row pitch 32 + pad words."""
    write = [4 * lane for lane in range(32)]
    read = [4 * (32 + pad) * lane for lane in range(32)]
    return Trace("transpose", "ch04_swizzle.cu", (4, 4, 1), (32, 8, 1),
                 shared=(_shared(30, write, op="st"), _shared(34, read)), blocks_traced=1)


def _cells(svg: str, cls: str) -> list[dict[str, str]]:
    return [dict(re.findall(r'([\w-]+)="([^"]*)"', m)) for m in re.findall(rf'<\w+ class="{cls}"([^>]*)>', svg)]


def test_naive_transpose_shows_its_32_way_column_read_and_the_padded_one_none() -> None:
    naive, padded = _transpose(0), _transpose(1)
    worst = traced.worst_shared(naive)[0]
    assert (worst.line, worst.per_request, worst.conflicts, worst.ways) == (34, 32.0, 8 * 31, 32)
    rows = _cells(traced.shared_table_svg(naive), "bar")
    assert [(r["data-line"], r["data-wavefronts"]) for r in rows] == [("34", "256"), ("30", "8")]  # worst first
    waves = {c["data-wave"] for c in _cells(traced.banks_svg(naive), "cell")}
    assert len(waves) == 32  # the picture: 32 wavefronts, one lane each
    assert all(int(r["data-wavefronts"]) == int(r["data-ideal"]) for r in _cells(traced.shared_table_svg(padded),
                                                                                   "bar"))
    assert {c["data-wave"] for c in _cells(traced.banks_svg(padded), "cell")} == {"0"}
    assert len({c["data-bank"] for c in _cells(traced.banks_svg(padded), "cell")}) == 32


def test_an_ldmatrix_is_drawn_through_the_matrix_rule() -> None:
    rows = [16 * 8 * r for r in range(32)]  # 32 rows of 128 B: every row in the same 4 banks
    acc = banks.analyze_matrix(rows, 4)
    s = SharedInstr(5, "ldmatrix(...)", "ldmatrix", "ldmatrix.sync.aligned.m8n8.x4.shared.b16", 16, 1,
                    acc.wavefronts, acc.ideal, 8, samples=(Sample(tuple(rows), 1, acc.wavefronts),))
    assert traced.shared_access(s).wavefronts == acc.wavefronts == 32
    with pytest.raises(ValueError, match="no lane addresses"):
        traced.shared_access(SharedInstr(5, "x", "ld", "ld.shared.b32", 4, 1, 1, 1, 1))


def _loads(stride: int) -> GlobalInstr:
    offs = tuple(4096 + 4 * stride * lane for lane in range(32))
    sectors = len({o // 32 for o in offs})
    return GlobalInstr(12, "float a = A[i * n + k];", "ld", 4, requests=64, sectors=64 * sectors,
                       samples=(Sample(offs, 64, sectors),))


def test_sectors_per_request_of_a_strided_and_a_coalesced_load() -> None:
    strided, coalesced = _loads(32), _loads(1)
    t = Trace("naive", "ch02_smem_tiling.cu", (1, 1, 1), (32, 1, 1), globals_=(coalesced, strided))
    bars = _cells(traced.global_table_svg(t), "bar")
    assert [int(b["data-sectors"]) // int(b["data-requests"]) for b in bars] == [32, 4]  # worst first
    lanes = _cells(traced.sectors_svg(t), "lane")
    assert len({c["data-sector"] for c in lanes}) == 32
    t2 = Trace("tiled", "ch02_smem_tiling.cu", (1, 1, 1), (32, 1, 1), globals_=(coalesced,))
    assert len({c["data-sector"] for c in _cells(traced.sectors_svg(t2), "lane")}) == 4
    assert traced.sector_map(coalesced)[:9] == [0] * 8 + [1]


def _ring(stages: int, tiles: int = 6, latency: int = 40, consume: int = 10) -> Trace:
    """Warp 0 issues a TMA load per tile into stage tile % stages; warps 1-2 wait on its full barrier, read, and
    release; the producer waits for a free stage. Clock: a toy max-plus run of that protocol."""
    ev: list[Event] = []
    land, free = [0] * tiles, [0] * tiles
    t_prod, t_cons = 0, 0
    for i in range(tiles):
        s = i % stages
        ready = free[i - stages] if i >= stages else 0
        if ready > t_prod:
            ev.append(Event(0, 0, t_prod, "mbarrier_wait", end=ready, id=1000 + s, line=20))
            t_prod = ready
        ev.append(Event(0, 0, t_prod, "tma_issue", id=4096 * s, line=21))
        land[i] = t_prod + latency
        ev.append(Event(0, 0, land[i], "tma_complete", id=4096 * s, line=21))
        t_prod += 2
        start = max(t_cons, land[i])
        for w in (1, 2):
            ev.append(Event(0, w, t_cons, "mbarrier_wait", end=start, id=2000 + s, line=30))
        t_cons = start + consume
        free[i] = t_cons
    return Trace("ring", "ch07_tma_ring.cu", (1, 1, 1), (160, 1, 1), events=tuple(ev), blocks_traced=1)


def test_a_one_stage_ring_waits_on_every_tile_and_three_stages_overlap() -> None:
    one, three = _ring(1), _ring(3)
    assert traced.ring_stages(one) == 1 and traced.ring_stages(three) == 3
    waits = lambda t: [w for w in _cells(traced.warps_svg(t), "wait")  # noqa: E731
                       if w["data-warp"] == "1" and int(w["data-end"]) > int(w["data-t"])]
    assert len(waits(one)) == 6  # the consumer waits on every tile
    assert len(waits(three)) < 6
    assert traced.wait_share(one)[1] > 0.7 > traced.wait_share(three)[1]
    twice = Trace("ring", "x.cu", (1, 1, 1), (160, 1, 1), events=one.events + one.events)  # recorded per lane
    assert traced.wait_share(twice) == traced.wait_share(one) and len(waits(twice)) == 6
    svg = traced.warps_svg(one)
    assert "warp 0 (producer)" in svg and "warp 1 (consumer)" in svg
    assert len([m for m in _cells(svg, "mark") if m["data-kind"] == "tma_issue"]) == 6
    model = traced.view(three, "07")[1]
    assert model.count('class="use"') == 6  # the model's timeline for the trace's 3 stages and 6 tiles, in steps
    assert "a ring of 3 stages (steps)" in model and "latency L = 40, read C = 10" in model


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_the_ring_model_fitted_to_a_trace_gives_its_period(stages: int) -> None:
    fit = traced.ring_fit(_ring(stages, tiles=12))
    assert fit is not None and (fit.stages, fit.latency, fit.consume, fit.tiles) == (stages, 40, 10, 12)
    assert fit.traced_period == pytest.approx(fit.model_period)  # the toy protocol is the model's max-plus system
    assert traced.ring_fit(Trace("k", "x.cu", (1, 1, 1), (32, 1, 1))) is None


def _wgmma(overlap: bool) -> Trace:
    """Two warpgroups (warps 0-3, 4-7), each three wgmma groups of 10 steps; overlapping or taking turns."""
    ev: list[Event] = []
    for g in range(3):
        for wg in (0, 1):
            start = 30 * g + (0 if overlap else 15 * wg)
            for w in range(4 * wg, 4 * wg + 4):
                ev += [Event(0, w, start, "wgmma_issue", id=g, line=40), Event(0, w, start + 1, "wgmma_issue", id=g,
                                                                                   line=41),
                       Event(0, w, start + 10, "wgmma_retire", id=g, line=42)]
    return Trace("flash", "ch10_flash.cu", (1, 1, 1), (256, 1, 1), events=tuple(ev), extra={"schedule": "ping-pong"})


def test_each_warpgroups_schedule_is_drawn_from_its_wgmma_groups() -> None:
    both, turns = _wgmma(True), _wgmma(False)
    spans = traced.wgmma_spans(both)
    assert [(s.group, s.start, s.end) for s in spans[:3]] == [(0, 0, 10), (0, 30, 40), (0, 60, 70)]
    assert len(spans) == 6  # one per group and warpgroup (the 4 warps of a warpgroup are one row)
    rects = _cells(traced.schedule_svg(both), "wgmma")
    assert sorted({r["data-group"] for r in rects}) == ["0", "1"] and len(rects) == 6
    assert traced._overlap(traced.wgmma_spans(both)) > 0.3 and traced._overlap(traced.wgmma_spans(turns)) == 0.0
    assert "ping-pong" in traced.view(both, "10")[1]  # the model drawn for the schedule the trace names


def test_a_trace_is_drawn_the_same_from_its_json_and_from_a_file(tmp_path: Path) -> None:
    t = _transpose(0)
    (tmp_path / "t.json").write_text(t.to_json())
    assert traced.view(t.to_json(), "04") == traced.view(t, "04") == traced.view(tmp_path / "t.json", "banks")
    with pytest.raises(ValueError, match="no trace at"):
        traced.load(tmp_path / "missing.json")
    with pytest.raises(TypeError, match="not int"):
        traced.load(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no trace view for chapter '05'"):
        traced.view(t, "05")


def test_every_drawing_fits_its_text_and_an_empty_trace_says_what_is_missing() -> None:
    empty = Trace("k", "x.cu", (1, 1, 1), (32, 1, 1))
    svgs = [*traced.view(_transpose(0), "04"), *traced.view(_ring(3), "07"), *traced.view(_wgmma(True), "10"),
            *traced.view(Trace("n", "x.cu", (1, 1, 1), (32, 1, 1), globals_=(_loads(32),)), "02")]
    for chapter in ("02", "04", "07", "10"):
        svgs += traced.view(empty, chapter)
    for svg in svgs:
        assert outside(svg) == [], outside(svg)
    assert "no shared-memory instruction ran" in traced.view(empty, "04")[0]
    assert "no global load or store ran" in traced.view(empty, "02")[0]
    assert "no waits, TMA or wgmma events" in traced.view(empty, "07")[0]
    assert "no wgmma was issued" in traced.view(empty, "10")[0]


def test_the_notebook_cell_says_when_the_exercise_is_still_the_stub(tmp_path: Path, monkeypatch) -> None:
    from tklab.grading import exercises as ex

    def no_trace(_exercise: str, _path: Path) -> Trace:
        raise AssertionError("an untouched stub must not be traced")

    monkeypatch.setattr(traced, "_run_trace", no_trace)
    for name in ("ch04_swizzle.cu", "ch07_tma_ring.cu", "ch10_flash.cu"):
        (tmp_path / name).write_text((ex.EXERCISES / name).read_text())  # the stub, as generated
    out = traced.yours("ch04_swizzle", exercises_dir=tmp_path)
    assert out.state == "stub" and "still the unfinished stub" in out.message and out.svgs == []
    ring = traced.yours("ch07_tma_ring", exercises_dir=tmp_path)
    assert ring.state == "stub" and "the model alone" in ring.message and "a ring of 2 stages" in ring.svgs[0]
    assert "ping-pong: tensor cores busy" in traced.yours("ch10_flash", exercises_dir=tmp_path).svgs[0]
    missing = traced.yours("ch02_smem_tiling", exercises_dir=tmp_path)
    assert missing.state == "missing" and "ch02_smem_tiling.cu is missing" in missing.message
    assert traced.yours("ch99_nothing", exercises_dir=tmp_path).state == "missing"


def test_the_notebook_cell_draws_a_changed_file_and_says_why_a_trace_failed(tmp_path: Path, monkeypatch) -> None:
    from tklab.grading import exercises as ex

    stub = (ex.EXERCISES / "ch04_swizzle.cu").read_text()
    text = stub.replace("return 0;  // a placeholder", "return r * 33 + c;  //")
    (tmp_path / "ch04_swizzle.cu").write_text(text)
    monkeypatch.setattr(traced, "_run_trace", lambda _e, _p: _transpose(0))
    out = traced.yours("ch04_swizzle", exercises_dir=tmp_path)
    assert out.state == "traced" and out.trace is not None
    assert "line 34" in out.message and "32 wavefronts per request, conflict-free would be 1" in out.message
    assert len(out.svgs) == 2

    (tmp_path / "ch10_flash.cu").write_text("// changed\n" + (ex.EXERCISES / "ch10_flash.cu").read_text())
    monkeypatch.setattr(traced, "_run_trace", lambda _e, _p: dataclasses.replace(_wgmma(True), extra={}))
    flash = traced.yours("ch10_flash", exercises_dir=tmp_path)  # its model: the schedule the exercise builds
    assert flash.trace is not None and flash.trace.extra["schedule"] == "ping-pong"  # -DSCHEDULE=2
    assert flash.svgs[1].count("ping-pong: tensor cores busy") == 1

    def broken(_e: str, _p: Path) -> Trace:
        raise RuntimeError("exercises/ch04_swizzle.cu:12: error: expected ';'\nmore detail")

    monkeypatch.setattr(traced, "_run_trace", broken)
    failed = traced.yours("ch04_swizzle", exercises_dir=tmp_path)
    assert failed.state == "failed" and failed.message.endswith("error: expected ';'")
    before = traced.yours("ch04_swizzle", trace=_transpose(1).to_json())  # a trace taken before: no tracing
    html = before._repr_html_()
    assert before.state == "traced" and "src='data:image/png;base64," in html
    assert "<table class='tk-trace'>" in html and "<td>34</td>" in html  # the source view, under the pictures


def test_the_explorers_take_a_trace() -> None:
    from tklab.widgets import attention_view, bank_explorer, pipeline_explorer

    ex = bank_explorer(trace=_transpose(0).to_json())
    assert ex.state()["pattern"] == ex.TRACED and ex.visible() == ["pattern", "traced"]
    assert ex.access is not None and ex.access.wavefronts == 32 and "line 34" in ex.status.value
    ex.traced.value = 1  # the next worst: the row write
    assert ex.access.wavefronts == 1 and "line 30" in ex.status.value
    ex.pattern.value = "stride"  # the model's patterns are still there
    assert ex.access.wavefronts == 1 and "traced" not in ex.visible()
    assert ex.TRACED not in bank_explorer().pattern.options  # no trace: no such pattern

    ring = pipeline_explorer(trace=_ring(3))
    assert ring.state()["stages"] == 3 and ring.figure.value.startswith(traced.warps_svg(_ring(3)))
    ring.stages.value = 1
    assert ring.figure.value.startswith(traced.warps_svg(_ring(3)))  # the trace stays; the model redraws
    sched = attention_view.schedule_explorer(trace=_wgmma(False))
    assert sched.figure.value.startswith(traced.schedule_svg(_wgmma(False))) and sched.figure.value.count("<svg") == 4


RECORDED = Path(__file__).resolve().parent / "data" / "traces"  # real traces (see its README)


def test_recorded_transposes_naive_32_way_and_the_solution_conflict_free() -> None:
    naive, solved = traced.load(RECORDED / "ch04_naive.json"), traced.load(RECORDED / "ch04_solution.json")
    worst = traced.worst_shared(naive)[0]
    assert worst.op == "ld" and worst.per_request == 32.0 and worst.ways == 32
    assert len({c["data-wave"] for c in _cells(traced.banks_svg(naive), "cell")}) == 32
    assert all(s.conflicts == 0 for s in solved.shared)
    assert "no bank conflicts" in traced._summary(solved, "04") and "32 wavefronts per request" in \
        traced._summary(naive, "04")


def test_recorded_ring_tiled_matmul_and_flash_attention_are_drawn() -> None:
    ring = traced.load(RECORDED / "ch07_tma_ring.json")
    svg = traced.warps_svg(ring)
    assert "warp 0 (producer)" in svg and "warp 4 (consumer)" in svg
    assert traced.ring_stages(ring) >= 2 and all(0 <= v <= 1 for v in traced.wait_share(ring).values())
    fit = traced.ring_fit(ring)
    assert fit is not None and fit.traced_period is not None
    assert abs(fit.model_period / fit.traced_period - 1) < 0.05  # the model, fitted, predicts the traced ring
    tiled = traced.load(RECORDED / "ch02_smem_tiling.json")
    assert "every global load and store is coalesced" in traced._summary(tiled, "02")
    flash = traced.load(RECORDED / "ch10_flash.json")
    spans = traced.wgmma_spans(flash)
    assert sorted({s.group for s in spans}) == [1, 2]  # the two consumer warpgroups (warpgroup 0 produces)
    assert all(s.end > s.start for s in spans) and len(spans) == 2 * len([s for s in spans if s.group == 1])
    assert traced._overlap(spans) > 0.5  # the overlapped schedule keeps both warpgroups' products in flight
    for svg in [*traced.view(ring, "07"), *traced.view(tiled, "02"), *traced.view(flash, "10"),
                traced.warps_svg(flash), *traced.view(RECORDED / "ch04_naive.json", "04")]:
        assert outside(svg) == [], outside(svg)
