"""The learner's own kernel, drawn from its trace (``tklab.trace``: what the CPU emulator saw it do), beside the
chapter's model. Deterministic SVG strings with ``data-*`` attributes, like the other drawings.

- chapter 02, ``sectors_svg``: each global instruction's 32-byte sectors per request against a coalesced
  warp's, and the worst request's lanes → sectors;
- chapter 04, ``banks_svg``: the shared-memory instructions worst first (wavefronts per request against
  conflict-free), and the worst one's lanes → banks, drawn through the validated bank model (``bank_svg``);
- chapter 07, ``warps_svg``: per warp, the barrier and mbarrier waits, TMA issues and completions, beside the
  ring model's timeline for as many stages as the trace used (``ring_model_svg``);
- chapter 10, ``schedule_svg``: per warpgroup, each wgmma group from issue to retirement, beside the
  schedules model (``attention_draw.timeline_svg``).

A trace's clock counts each warp's instructions (``tklab.trace.model``): it orders and spaces events, it is
not time, so the model's timeline (µs or time units) is drawn separately, never on the trace's axis.

Public API: ``load(trace_or_json_or_path) -> Trace``, ``worst_shared``, ``shared_access``, ``shared_table_svg``,
``banks_svg``, ``worst_global``, ``sector_map``, ``global_table_svg``, ``sectors_svg``, ``warps_svg``, ``events``,
``wait_share``, ``ring_stages``, ``ring_fit``, ``ring_model_svg``, ``ring_view``, ``wgmma_spans``, ``schedule_svg``,
``schedule_model_svg``,
``view(trace, chapter) -> list[str]``, ``yours(exercise, *, trace=None) -> Yours`` (the notebooks' "your
kernel, traced" output; the learner's kernel runs only where ``tklab.trace`` runs it, in its sandboxed child).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from ..models import banks
from ..trace.model import LANES, SECTOR_BYTES, Event, GlobalInstr, SharedInstr, Trace
from .draw import _svg, _text, bank_svg, lane_color, text_width

WAIT_COLORS = {"barrier_wait": "#9aa5b1", "mbarrier_wait": "#e07b39"}
MARK_COLORS = {"tma_issue": "#3b6ea8", "tma_complete": "#59a14f", "wgmma_issue": "#7b3fa8",
               "wgmma_retire": "#b07aa1"}
CHAPTERS = {"02": "sectors", "04": "banks", "07": "ring", "10": "schedule"}
SOURCE_LINES = 12  # lines of the source view a notebook cell shows under the pictures
MAX_MARKS = 900  # marks one timeline draws before it shows a window of the run (the PNG stays quick)


def load(t: Trace | str | Path | dict) -> Trace:
    """A trace from a ``Trace``, its JSON text, a dict of that JSON, or a path to a JSON file."""
    if isinstance(t, Trace):
        return t
    if isinstance(t, dict):
        return Trace.from_json(json.dumps(t))
    if isinstance(t, str) and t.lstrip().startswith("{"):
        return Trace.from_json(t)
    if isinstance(t, str | Path):
        p = Path(t)
        if not p.is_file():
            raise ValueError(f"no trace at {p}: give a tklab.trace(...) result, its JSON text, or a JSON file")
        return Trace.from_json(p.read_text())
    raise TypeError(f"a trace is a tklab Trace, its JSON or a path to it, not {type(t).__name__}")


def where(line: int, text: str, limit: int = 48) -> str:
    """How every drawing names an instruction of the learner's file: "line N: its text", shortened."""
    s = text if len(text) <= limit else text[: limit - 1] + "…"
    return f"line {line}: {s}" if line else f"(not your file) {s}"


# ---- chapter 04: banks ---------------------------------------------------------------------------------------
def worst_shared(trace: Trace) -> list[SharedInstr]:
    """Shared-memory instructions, most extra wavefronts first (then most wavefronts, then by line)."""
    return sorted(trace.shared, key=lambda s: (-s.conflicts, -s.wavefronts, s.line, s.ptx))


def _matrices(instr: SharedInstr) -> int:
    for num in (4, 2, 1):
        if f".x{num}" in instr.ptx:
            return num
    raise ValueError(f"{instr.ptx}: an ldmatrix/stmatrix names .x1, .x2 or .x4")


def shared_access(instr: SharedInstr, sample: int = 0) -> banks.Access:
    """One recorded execution of ``instr`` (its worst by default) through the bank model."""
    if not instr.samples:
        raise ValueError(f"{where(instr.line, instr.text)}: the trace kept no lane addresses for it")
    offs = instr.samples[sample].offsets
    if instr.op in ("ldmatrix", "stmatrix"):
        return banks.analyze_matrix(offs, _matrices(instr), store=instr.op == "stmatrix")
    return banks.analyze(offs, instr.width, store=instr.op == "st")


def _table(title: str, rows: list[tuple[str, float, float, str]], unit: str, attrs: list[str],
           width: int = 760) -> str:
    """Rows of (label, value, ideal, right-hand text) as bars with the ideal marked: the worst rows first."""
    left, top, row_h = 12, 30, 20
    label_w = max([text_width(r[0], 10) for r in rows] + [120]) + 16
    right_w = max([text_width(r[3], 10) for r in rows] + [60]) + 16
    bar_w = max(160.0, width - left - label_w - right_w)
    width = int(left + label_w + bar_w + right_w)
    top_v = max([max(r[1], r[2]) for r in rows] + [1.0])
    body = [_text(left, 16, title, anchor="start", size=12, weight="bold")]
    x0 = left + label_w
    for i, ((label, v, ideal, note), attr) in enumerate(zip(rows, attrs, strict=True)):
        y = top + i * row_h
        bad = v > ideal + 1e-9
        body.append(_text(left, y + 14, label, anchor="start", size=10))
        body.append(f'<rect class="bar" {attr} x="{x0}" y="{y + 3}" width="{max(1.0, v / top_v * bar_w):.1f}" '
                    f'height="{row_h - 6}" fill="{"#d1495b" if bad else "#6a9fcf"}"/>')
        ix = x0 + ideal / top_v * bar_w
        body.append(f'<line class="ideal" x1="{ix:.1f}" y1="{y + 1}" x2="{ix:.1f}" y2="{y + row_h - 1}" '
                    'stroke="#222" stroke-dasharray="2 2"/>')
        body.append(_text(x0 + bar_w + 8, y + 14, note, anchor="start", size=10,
                          fill="#b00020" if bad else "#222"))
    y = top + len(rows) * row_h + 14
    body.append(_text(left, y, f"bar: {unit}; dashed line: the same instruction without waste", anchor="start",
                      size=9, fill="#555"))
    return _svg(width, y + 8, body)


def shared_table_svg(trace: Trace, *, shown: int = 8) -> str:
    """The shared-memory instructions worst first: wavefronts per request against conflict-free."""
    instrs = worst_shared(trace)
    if not instrs:
        return _note_svg(f"{trace.kernel}: no shared-memory instruction ran (nothing for the banks to show)")
    rows = [(where(s.line, s.text), s.per_request, s.ideal / s.executions if s.executions else 0.0,
             f"{s.per_request:.3g} wavefronts/request ({s.ways}-way), {s.ptx}") for s in instrs[:shown]]
    attrs = [f'data-line="{s.line}" data-ptx="{escape(s.ptx)}" data-wavefronts="{s.wavefronts}" '
             f'data-ideal="{s.ideal}" data-executions="{s.executions}" data-ways="{s.ways}"' for s in instrs[:shown]]
    more = f" (worst {shown} of {len(instrs)})" if len(instrs) > shown else ""
    return _table(f"{trace.kernel}: shared-memory instructions{more}", rows, "wavefronts per request", attrs)


def banks_svg(trace: Trace, *, which: int = 0) -> str:
    """The ``which``-th worst shared-memory instruction's recorded worst execution: lanes → banks."""
    instrs = worst_shared(trace)
    if not instrs:
        return _note_svg(f"{trace.kernel}: no shared-memory instruction ran (nothing for the banks to show)")
    s = instrs[which]
    tail = f": one warp's {s.ptx}"
    return bank_svg(shared_access(s), title=where(s.line, s.text, max(16, 82 - len(tail))) + tail)


# ---- chapter 02: sectors -------------------------------------------------------------------------------------
def worst_global(trace: Trace) -> list[GlobalInstr]:
    """Global instructions, most wasted sectors per request first."""
    return sorted(trace.globals_, key=lambda g: (-(g.sectors_per_request / g.ideal_sectors_per_request),
                                                 -g.sectors, g.line))


def sector_map(instr: GlobalInstr, sample: int = 0) -> list[int | None]:
    """Each lane's sector in the recorded request (0, 1, ... in address order; None: lane idle)."""
    offs = instr.samples[sample].offsets
    touched = sorted({o // SECTOR_BYTES for o in offs if o is not None}
                     | {(o + instr.width - 1) // SECTOR_BYTES for o in offs if o is not None})
    rank = {s: i for i, s in enumerate(touched)}
    return [None if o is None else rank[o // SECTOR_BYTES] for o in offs]


def global_table_svg(trace: Trace, *, shown: int = 8) -> str:
    """Sectors per request of each global instruction against a coalesced warp's, the most wasteful first."""
    instrs = worst_global(trace)
    if not instrs:
        return _note_svg(f"{trace.kernel}: no global load or store ran (no sectors to show)")
    rows = [(where(g.line, g.text), g.sectors_per_request, g.ideal_sectors_per_request,
             f"{g.sectors_per_request:.3g} sectors/request (coalesced: {g.ideal_sectors_per_request:g}), "
             f"{g.op} {g.width} B") for g in instrs[:shown]]
    attrs = [f'data-line="{g.line}" data-op="{g.op}" data-requests="{g.requests}" data-sectors="{g.sectors}"'
             for g in instrs[:shown]]
    more = f" (worst {shown} of {len(instrs)})" if len(instrs) > shown else ""
    return _table(f"{trace.kernel}: global loads and stores{more}", rows, "32-byte sectors per request", attrs)


def sectors_svg(trace: Trace, *, which: int = 0) -> str:
    """The ``which``-th most wasteful global instruction's recorded request: each lane's 32-byte sector."""
    instrs = worst_global(trace)
    if not instrs or not instrs[which].samples:
        return _note_svg(f"{trace.kernel}: no global request was recorded (no sectors to show)")
    return _lanes_sectors_svg(instrs[which])


def _lanes_sectors_svg(g: GlobalInstr) -> str:
    cell, left, top = 22, 60, 44
    sec = sector_map(g)
    n = max((s for s in sec if s is not None), default=-1) + 1
    title = f"{where(g.line, g.text, 44)}: one warp's request touches {n} sector{'s' if n != 1 else ''}"
    body = [_text(12, 16, title, anchor="start", size=12, weight="bold"),
            _text(left - 6, top - 6, "lane", anchor="end", size=8, fill="#666"),
            _text(left - 6, top + cell * 0.68, "sector", anchor="end", size=8, fill="#666")]
    for lane in range(LANES):
        x = left + lane * cell
        body.append(_text(x + cell / 2, top - 6, str(lane), size=8, fill="#666"))
        s = sec[lane]
        fill = "#f4f4f4" if s is None else lane_color(s)
        body.append(f'<rect class="lane" data-lane="{lane}" data-sector="{"" if s is None else s}" x="{x}" '
                    f'y="{top}" width="{cell}" height="{cell}" fill="{fill}" stroke="#fff"/>')
        if s is not None:
            body.append(_text(x + cell / 2, top + cell * 0.68, str(s), size=9))
    foot = (f"a warp asking for {LANES} x {g.width} B in a row touches {g.ideal_sectors_per_request:g} sectors "
            "(one more if the row starts mid-sector); the same colour = the same 32-byte sector")
    body.append(_text(12, top + cell + 20, foot, anchor="start", size=9, fill="#555"))
    width = max(left + LANES * cell + 10, 24 + text_width(title, 12), 24 + text_width(foot, 9))
    return _svg(int(width), top + cell + 28, body)


# ---- chapters 07 and 10: timelines ---------------------------------------------------------------------------
def _window(events: list[Event]) -> tuple[list[Event], str]:
    if len(events) <= MAX_MARKS:
        return events, ""
    cut = sorted(e.t for e in events)[MAX_MARKS]
    kept = [e for e in events if e.t < cut]
    return kept, f"the first {len(kept)} of {len(events)} events (to step {cut})"


def _axis(body: list[str], left: float, y: float, t0: int, t1: int, px: float) -> None:
    span = max(t1 - t0, 1)
    step = 10 ** max(0, len(str(span)) - 1)
    if span / step < 4:
        step //= 2 or 1
    step = max(step, 1)
    body.append(f'<line x1="{left}" y1="{y}" x2="{left + span * px:.1f}" y2="{y}" stroke="#888"/>')
    t = (t0 + step - 1) // step * step
    while t <= t1:
        x = left + (t - t0) * px
        body.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#888"/>')
        body.append(_text(x, y + 14, str(t), size=8, fill="#555"))
        t += step


def events(trace: Trace, block: int = 0, warp: int | None = None) -> list[Event]:
    """The block's (or one warp's) events in time order, each once (a trace may record a warp's event per lane)."""
    return sorted({e for e in trace.events if e.block == block and (warp is None or e.warp == warp)},
                  key=lambda e: (e.warp, e.t, e.kind, e.end or 0, e.id or 0))


def wait_share(trace: Trace, block: int = 0) -> dict[int, float]:
    """Per warp of ``block``: the share of its traced span spent in barrier and mbarrier waits."""
    out: dict[int, float] = {}
    for w in sorted({e.warp for e in trace.events if e.block == block}):
        evs = events(trace, block, w)
        t0 = min(e.t for e in evs)
        t1 = max(e.end if e.end is not None else e.t for e in evs)
        waited, reach = 0, t0  # the union of the waits (a warp's recorded waits may overlap)
        for a, b in sorted((e.t, e.end) for e in evs if e.kind in WAIT_COLORS and e.end is not None):
            waited += max(0, b - max(a, reach))
            reach = max(reach, b)
        out[w] = waited / (t1 - t0) if t1 > t0 else 0.0
    return out


def warps_svg(trace: Trace, *, block: int = 0, width: int = 760) -> str:
    """One row per warp of ``block``: waits as bars, TMA and wgmma issues/completions as ticks."""
    evs = events(trace, block)
    if not evs:
        return _note_svg(f"{trace.kernel}: no waits, TMA or wgmma events in block {block}")
    evs, cut = _window(evs)
    warps = sorted({e.warp for e in evs})
    t0 = min(e.t for e in evs)
    t1 = max(e.end if e.end is not None else e.t for e in evs)
    names = [f"warp {w}" + (f" ({r})" if (r := _role(trace, block, w)) else "") for w in warps]
    left = 18 + max(text_width(n, 10) for n in names)
    top, row_h = 34, 20
    px = (width - left - 20) / max(t1 - t0, 1)
    shares = wait_share(trace, block)
    body = [_text(12, 16, f"{trace.kernel}, block {block}: what each warp waited for (trace clock, in steps)",
                  anchor="start", size=12, weight="bold")]
    for r, (w, name) in enumerate(zip(warps, names, strict=True)):
        y = top + r * row_h
        body.append(_text(left - 8, y + 14, name, anchor="end", size=10))
        body.append(f'<line x1="{left}" y1="{y + row_h - 1}" x2="{left + (t1 - t0) * px:.1f}" y2="{y + row_h - 1}" '
                    'stroke="#eee"/>')
        for e in (e for e in evs if e.warp == w):
            x = left + (e.t - t0) * px
            common = (f'data-warp="{w}" data-kind="{e.kind}" data-t="{e.t}" data-line="{e.line}"'
                      + (f' data-id="{e.id}"' if e.id is not None else ""))
            if e.kind in WAIT_COLORS:
                x1 = left + ((e.end if e.end is not None else e.t) - t0) * px
                body.append(f'<rect class="wait" {common} data-end="{e.end}" x="{x:.1f}" y="{y + 3}" '
                            f'width="{max(x1 - x, 1.0):.1f}" height="{row_h - 7}" fill="{WAIT_COLORS[e.kind]}"/>')
            else:
                up = e.kind.endswith("issue")
                body.append(f'<line class="mark" {common} x1="{x:.1f}" y1="{y + (2 if up else 9)}" x2="{x:.1f}" '
                            f'y2="{y + (10 if up else row_h - 3)}" stroke="{MARK_COLORS[e.kind]}" stroke-width="2"/>')
        body.append(_text(left + (t1 - t0) * px + 4, y + 14, f"{shares.get(w, 0):.0%}", anchor="start", size=9,
                          fill="#555"))
    y = top + len(warps) * row_h + 4
    _axis(body, left, y, t0, t1, px)
    legend = [("wait", "#9aa5b1", "barrier wait"), ("wait", "#e07b39", "mbarrier wait"),
              ("mark", "#3b6ea8", "TMA issued"), ("mark", "#59a14f", "TMA landed"),
              ("mark", "#7b3fa8", "wgmma issued"), ("mark", "#b07aa1", "wgmma retired")]
    kinds = {e.kind for e in evs}
    keep = {"barrier wait": "barrier_wait", "mbarrier wait": "mbarrier_wait", "TMA issued": "tma_issue",
            "TMA landed": "tma_complete", "wgmma issued": "wgmma_issue", "wgmma retired": "wgmma_retire"}
    x, ly = left, y + 34
    for _cls, color, label in legend:
        if keep[label] not in kinds:
            continue
        body.append(f'<rect x="{x:.1f}" y="{ly - 9}" width="10" height="10" fill="{color}"/>')
        body.append(_text(x + 14, ly, label, anchor="start", size=9))
        x += 30 + text_width(label, 9)
    note = "right: share of each warp's span spent waiting" + (f"; {cut}" if cut else "")
    body.append(_text(12, ly + 18, note, anchor="start", size=9, fill="#555"))
    return _svg(int(max(width + 30, x + 10, text_width(note, 9) + 24)), ly + 26, body)


def _role(trace: Trace, block: int, warp: int) -> str:
    kinds = {e.kind for e in events(trace, block, warp)}
    if "tma_issue" in kinds:
        return "producer"
    if "wgmma_issue" in kinds:
        return f"warpgroup {warp // 4}"
    if "mbarrier_wait" in kinds:
        return "consumer"
    return ""


def ring_stages(trace: Trace) -> int:
    """How many stages the traced ring used: the distinct shared-memory boxes its TMA loads filled."""
    return len({e.id for e in trace.events if e.kind == "tma_issue" and e.id is not None})


def _median(xs: list[float]) -> float | None:
    xs = sorted(xs)
    return None if not xs else (xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2)


@dataclass(frozen=True)
class RingFit:
    """The ring model's parameters read off a trace (in the trace's steps), and the period each gives."""

    stages: int
    latency: float    # L: a TMA load's issue to its completion
    consume: float    # C: a consumer's work between getting a full stage and waiting for the next
    issue: float      # P: the producer's steps between two loads it did not have to wait for
    tiles: int        # tiles block 0's producer loaded
    traced_period: float | None  # steps per tile of the first consumer, a lap (S tiles) at a time, median
    model_period: float          # the model's steady state for these numbers: max(C, P, (L + C) / S)


def ring_fit(trace: Trace, block: int = 0) -> RingFit | None:
    """The ring model fitted to ``block``'s events (None: no TMA loads, or no consumer waits, to fit)."""
    from .ring import steady_period

    evs = events(trace, block)
    issues = [e for e in evs if e.kind == "tma_issue"]
    done: dict[int | None, list[int]] = defaultdict(list)
    for e in (e for e in evs if e.kind == "tma_complete"):
        done[e.id].append(e.t)
    landed = [done[e.id].pop(0) - e.t for e in sorted(issues, key=lambda e: e.t) if done.get(e.id)]
    producers = {e.warp for e in issues}
    gaps: list[float] = []
    first_ends: list[int] = []
    for w in sorted({e.warp for e in evs if e.kind == "mbarrier_wait"} - producers):
        waits = [e for e in events(trace, block, w) if e.kind == "mbarrier_wait" and e.end is not None]
        gaps += [b.t - a.end for a, b in zip(waits, waits[1:], strict=False) if a.end is not None]
        if not first_ends:
            first_ends = [e.end for e in waits if e.end is not None]
    unblocked = [b.t - a.t for a, b in zip(issues, issues[1:], strict=False)
                 if not any(e.kind in WAIT_COLORS and e.warp == a.warp and a.t < e.t < b.t and e.duration > 0
                            for e in evs)]
    latency, consume = _median(landed), _median(gaps)
    if not issues or latency is None or consume is None:
        return None
    stages = max(1, ring_stages(trace))
    issue = _median(unblocked) or 1.0
    # a lap at a time (tile i against tile i - S): the first tiles' ramp, with the ring filling, does not count
    laps = [(b - a) / stages for a, b in zip(first_ends, first_ends[stages:], strict=False)]
    period = _median(laps) if laps else ((first_ends[-1] - first_ends[0]) / (len(first_ends) - 1)
                                         if len(first_ends) > 1 else None)
    return RingFit(stages, float(latency), float(consume), float(issue), len(issues), period,
                   steady_period(stages, latency, consume, 0.0, issue))


def ring_model_svg(stages: int, *, latency: float = 1.5, consume: float = 0.3, transfer: float = 1.0,
                   issue: float = 0.05, tiles: int = 12, unit: str = "µs") -> str:
    """Chapter 07's ring model for ``stages`` (the explorer's defaults in µs, or a trace's fit in steps)."""
    from .ring import simulate, timeline_svg

    s = max(1, stages)
    return timeline_svg(simulate(s, latency, consume, transfer, issue, tiles=tiles), unit=unit,
                        title=f"the model: a ring of {s} stage{'s' if s > 1 else ''} ({unit})")


def ring_view(trace: Trace) -> list[str]:
    """The traced warps, then the ring model: with the numbers read off the trace where they can be (same
    clock, so the two timelines compare), else with the explorer's defaults."""
    fit = ring_fit(trace)
    if fit is None:
        return [warps_svg(trace), ring_model_svg(ring_stages(trace))]
    return [warps_svg(trace), ring_model_svg(fit.stages, latency=fit.latency, consume=fit.consume, transfer=0.0,
                                             issue=fit.issue, tiles=max(fit.tiles, 2), unit="steps")]


@dataclass(frozen=True)
class WgmmaSpan:
    """One wgmma group of one warpgroup, from its first issue to its retirement (trace clock)."""

    group: int      # warpgroup
    id: int | None  # the wgmma group's id
    start: int
    end: int
    line: int


def wgmma_spans(trace: Trace, block: int = 0) -> list[WgmmaSpan]:
    """Per warpgroup (read from its lowest warp with wgmma events), each group from issue to retirement.

    A warpgroup's groups retire in the order they were committed, so retirements pair with issues first in,
    first out. Where a trace records one issue per wgmma instruction (more issues than retirements),
    consecutive issues with the same group id, no retirement between them, are one group."""
    by_wg: dict[int, list[Event]] = defaultdict(list)
    for e in (e for e in events(trace, block) if e.kind.startswith("wgmma")):
        by_wg[e.warp // 4].append(e)
    spans: list[WgmmaSpan] = []
    for wg, evs in sorted(by_wg.items()):
        warp = min(e.warp for e in evs)
        evs = [e for e in evs if e.warp == warp]
        merge = sum(e.kind == "wgmma_issue" for e in evs) != sum(e.kind == "wgmma_retire" for e in evs)
        open_: list[Event] = []  # first issue of each group not yet retired, oldest first
        last: Event | None = None
        for e in evs:
            if e.kind == "wgmma_issue":
                same = merge and last is not None and last.kind == "wgmma_issue" and e.id is not None \
                    and last.id == e.id
                if not same:
                    open_.append(e)
            elif open_:
                first = open_.pop(0)
                spans.append(WgmmaSpan(wg, e.id if e.id is not None else first.id, first.t, e.t, first.line))
            last = e
    return sorted(spans, key=lambda s: (s.group, s.start))


def schedule_svg(trace: Trace, *, block: int = 0, width: int = 760) -> str:
    """One row per warpgroup: each wgmma group from issue to retirement; where rows overlap, the warpgroups
    had products in flight at once (the tensor cores interleave them)."""
    spans = wgmma_spans(trace, block)
    if not spans:
        return _note_svg(f"{trace.kernel}: no wgmma was issued and retired in block {block}")
    groups = sorted({s.group for s in spans})
    t0, t1 = min(s.start for s in spans), max(s.end for s in spans)
    left, top, lane_h = 120, 34, 9
    px = (width - left - 20) / max(t1 - t0, 1)
    body = [_text(12, 16, f"{trace.kernel}, block {block}: each warpgroup's wgmma groups, issue → retirement "
                  "(trace clock)", anchor="start", size=12, weight="bold")]
    y = top
    for g in groups:
        mine = [s for s in spans if s.group == g]
        ends: list[int] = []  # greedy lanes so overlapping groups of one warpgroup stack
        placed: list[tuple[WgmmaSpan, int]] = []
        for s in mine:
            k = next((i for i, e in enumerate(ends) if e <= s.start), len(ends))
            if k == len(ends):
                ends.append(s.end)
            else:
                ends[k] = s.end
            placed.append((s, k))
        h = max(1, len(ends)) * lane_h + 6
        body.append(_text(left - 8, y + h / 2 + 4, f"warpgroup {g}", anchor="end", size=10))
        for s, k in placed:
            x0, x1 = left + (s.start - t0) * px, left + (s.end - t0) * px
            body.append(f'<rect class="wgmma" data-group="{g}" data-id="{"" if s.id is None else s.id}" '
                        f'data-start="{s.start}" data-end="{s.end}" data-line="{s.line}" x="{x0:.1f}" '
                        f'y="{y + 3 + k * lane_h}" width="{max(x1 - x0, 1.0):.1f}" height="{lane_h - 2}" '
                        f'fill="{MARK_COLORS["wgmma_issue"] if g % 2 == 0 else "#4e79a7"}"/>')
        y += h
        body.append(f'<line x1="{left}" y1="{y}" x2="{left + (t1 - t0) * px:.1f}" y2="{y}" stroke="#eee"/>')
    _axis(body, left, y + 4, t0, t1, px)
    both = _overlap(spans)
    note = f"both warpgroups had products in flight for {both:.0%} of the run" if len(groups) > 1 else \
        "one warpgroup: nothing to interleave"
    body.append(_text(12, y + 38, note, anchor="start", size=9, fill="#555"))
    return _svg(width + 10, int(y + 46), body)


def _overlap(spans: list[WgmmaSpan]) -> float:
    """Share of the run during which at least two warpgroups had a wgmma group in flight."""
    pts = sorted({p for s in spans for p in (s.start, s.end)})
    if len(pts) < 2:
        return 0.0
    both = sum(b - a for a, b in zip(pts, pts[1:], strict=False)
               if len({s.group for s in spans if s.start <= a and s.end >= b}) >= 2)
    return both / (pts[-1] - pts[0])


def schedule_model_svg(schedule: str = "overlap", **kw: Any) -> str:
    from ..models import schedules
    from .attention_draw import timeline_svg

    return timeline_svg(schedules.simulate(schedule, **kw))


# ---- one call per chapter ------------------------------------------------------------------------------------
def view(trace: Trace | str | Path | dict, chapter: str) -> list[str]:
    """The drawings a chapter shows for a trace: the learner's own first, then the model's where it has one."""
    t = load(trace)
    kind = CHAPTERS.get(chapter, chapter)
    if kind == "sectors":
        return [global_table_svg(t), sectors_svg(t)] if t.globals_ else [global_table_svg(t)]
    if kind == "banks":
        return [shared_table_svg(t), banks_svg(t)] if t.shared else [shared_table_svg(t)]
    if kind == "ring":
        return ring_view(t)
    if kind == "schedule":
        return [schedule_svg(t), schedule_model_svg(str(t.extra.get("schedule", "overlap")))]
    raise ValueError(f"no trace view for chapter {chapter!r}: one of {sorted(CHAPTERS)} or {sorted(CHAPTERS.values())}")


def _note_svg(text: str) -> str:
    return _svg(int(text_width(text, 11) + 24), 30, [_text(12, 19, text, anchor="start", size=11)])


# ---- the notebooks' cell -------------------------------------------------------------------------------------
@dataclass
class Yours:
    """What a chapter's "your kernel, traced" cell shows: a sentence, then the learner's drawings and the model's.

    Shown as HTML with the drawings as one PNG (an untrusted notebook shows it; SVG it would not)."""

    exercise: str
    message: str
    svgs: list[str]
    trace: Trace | None = None
    state: str = "traced"  # "traced", "stub", "missing", "failed"

    def _repr_html_(self) -> str:
        import base64

        from .raster import stacked_png

        color = "#222" if self.state == "traced" else "#8a4b00"
        out = f"<p style='color:{color}'><b>{escape(self.message)}</b></p>"
        if self.svgs:
            png, (w, _h) = stacked_png(self.svgs)
            out += (f"<img alt='{escape(self.exercise)}, traced, beside the model' width='{w:g}' "
                    f"src='data:image/png;base64,{base64.b64encode(png).decode()}'/>")
        if self.trace is not None:  # every line of the learner's file the trace saw, the costliest first
            from ..trace import view as source_view

            out += (f"<details><summary>your lines, costliest first</summary>"
                    f"{source_view.html(self.trace, limit=SOURCE_LINES)}</details>")
        return f"<div>{out}</div>"

    def __repr__(self) -> str:
        n = len(self.svgs)
        return self.message + (f" [{n} drawing{'s' if n != 1 else ''}]" if n else "")


def _exercise_file(exercise: str, exercises_dir: Path | None) -> tuple[Path, Path]:
    from ..grading import exercises as ex

    root = exercises_dir or ex.EXERCISES
    for suffix in (".cu", ".py"):
        solution = ex.SOLUTIONS / exercise / f"{exercise}{suffix}"  # an exercise's folder
        if solution.is_file():
            return root / solution.name, solution
    raise ValueError(f"no exercise named {exercise!r} (see python -m tklab exercises --list)")


def is_stub(path: Path, solution: Path) -> bool:
    """Whether the learner's file is still exactly the generated exercise (nothing filled in yet)."""
    from ..grading import exercises as ex

    shown = f"{ex.SOLUTIONS.name}/{solution.parent.name}/{solution.name}"  # as the generator names it (its folder)
    return path.read_text() == ex.render(solution.read_text(), shown, solution.suffix)


def _model_only(exercise: str, chapter: str, stages: int) -> list[str]:
    kind = CHAPTERS.get(chapter, chapter)
    if kind == "ring":
        return [ring_model_svg(stages)]
    if kind == "schedule":
        return [schedule_model_svg(_schedule_of(exercise))]
    return []


def _run_trace(exercise: str, path: Path) -> Trace:
    """``tklab.trace(exercise, path=...)``: the learner's kernel in the sandboxed child, its trace back as data."""
    from ..grading.traced import trace_exercise

    return load(trace_exercise(exercise, path=path))


def yours(exercise: str, *, chapter: str | None = None, trace: Trace | str | Path | None = None,
          exercises_dir: Path | None = None, stages: int = 2, quiet: bool = False) -> Yours:
    """Trace the learner's ``exercises/<exercise>`` and draw it beside the chapter's model.

    An untouched exercise (still the generated stub) is not traced: the output says so and shows the model.
    A trace that cannot be taken (the file does not compile, the kernel fails) says why in one sentence;
    nothing here raises into the notebook. ``trace=`` draws a trace taken before (no tracing)."""
    chapter = chapter or exercise[2:4]
    if trace is not None:
        t = load(trace)
        return Yours(exercise, _summary(t, chapter), view(t, chapter), t)
    try:
        path, solution = _exercise_file(exercise, exercises_dir)
    except ValueError as e:
        return Yours(exercise, str(e), [], state="missing")
    if not path.is_file():
        return Yours(exercise, f"exercises/{path.name} is missing: python -m tklab exercises puts it back "
                     "(your other files are kept)", _model_only(exercise, chapter, stages), state="missing")
    if is_stub(path, solution):
        return Yours(exercise, f"exercises/{path.name} is still the unfinished stub (its TODOs are empty), so there "
                     "is no kernel of yours to trace yet: fill it in, then run this cell again."
                     + (" Below, the model alone." if _model_only(exercise, chapter, stages) else ""),
                     _model_only(exercise, chapter, stages), state="stub")
    if not quiet:  # tracing takes a while (a file's first trace builds it for the emulator): say what runs
        print(f"tracing exercises/{path.name} on the CPU emulator ...", flush=True)
    try:
        t = _with_schedule(_run_trace(exercise, path), exercise)
    except Exception as e:  # noqa: BLE001 -- the notebook shows why in a sentence instead of a traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return Yours(exercise, f"could not trace exercises/{path.name}: {first}",
                     _model_only(exercise, chapter, stages), state="failed")
    return Yours(exercise, _summary(t, chapter), view(t, chapter), t)


def _schedule_of(exercise: str) -> str:
    """The schedule the exercise is built with (``-DSCHEDULE=0/1/2``: plain, overlap, ping-pong); else overlap."""
    from ..grading import specs
    from ..models import schedules

    try:
        options = specs.get(exercise).options
    except (KeyError, ValueError):
        return "overlap"
    for o in options:
        if o.startswith("-DSCHEDULE=") and o[11:].isdigit() and int(o[11:]) < len(schedules.SCHEDULES):
            return schedules.SCHEDULES[int(o[11:])]
    return "overlap"


def _with_schedule(t: Trace, exercise: str) -> Trace:
    import dataclasses

    return dataclasses.replace(t, extra={**t.extra, "schedule": _schedule_of(exercise)})


def _summary(t: Trace, chapter: str) -> str:
    """One sentence: the worst thing the trace shows for the chapter's subject."""
    kind = CHAPTERS.get(chapter, chapter)
    head = f"{t.kernel}, traced on the CPU ({t.blocks_traced or 'all'} block{'s' if t.blocks_traced != 1 else ''})"
    if kind == "banks" and t.shared:
        s = worst_shared(t)[0]
        if not s.conflicts:
            return f"{head}: no bank conflicts in its {len(t.shared)} shared-memory instructions."
        return (f"{head}: worst shared-memory access {where(s.line, s.text)}, {s.per_request:.3g} wavefronts "
                f"per request, conflict-free would be {s.ideal / max(s.executions, 1):.3g}.")
    if kind == "sectors" and t.globals_:
        g = worst_global(t)[0]
        if g.sectors_per_request <= g.ideal_sectors_per_request:
            return (f"{head}: every global load and store is coalesced (at most {g.sectors_per_request:.3g} sectors "
                    f"per request; a warp's 32 x {g.width} B in a row take {g.ideal_sectors_per_request:g}).")
        return (f"{head}: worst global access {where(g.line, g.text)}, {g.sectors_per_request:.3g} sectors per "
                f"request, coalesced would be {g.ideal_sectors_per_request:g}.")
    if kind == "ring" and t.events:
        shares = wait_share(t)
        said = (f"{head}: a ring of {ring_stages(t)} stage{'s' if ring_stages(t) != 1 else ''}; the warps wait "
                + ", ".join(f"warp {w} {v:.0%}" for w, v in shares.items()) + " of their time.")
        fit = ring_fit(t)
        if fit is not None and fit.traced_period is not None:
            said += (f" Fitted (L = {fit.latency:g}, C = {fit.consume:g}, P = {fit.issue:g} steps), the model gives a "
                     f"tile every {fit.model_period:.3g} steps; the trace took {fit.traced_period:.3g}.")
        return said
    if kind == "schedule" and t.events:
        spans = wgmma_spans(t)
        return (f"{head}: {len(spans)} wgmma groups over {len({s.group for s in spans})} warpgroups; products of "
                f"two warpgroups in flight together {_overlap(spans):.0%} of the run.")
    return f"{head}: nothing for this chapter's picture was recorded."
