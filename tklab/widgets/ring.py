"""A ring of shared-memory stages between a producer (TMA) and a consumer, as a timeline: the model and
its deterministic SVG (chapter 07).

The model is the smallest one that shows why stages help and why the gain stops. Tiles i = 0, 1, ... go
through stage i % S (lap i // S). Times are in microseconds:

    issue[i] = max(issue[i-1] + P, release[i-S])        the producer waits for the stage to be free
    land[i]  = max(issue[i] + L, land[i-1] + T)         latency L; the memory pipe delivers one stage per T
    start[i] = max(land[i], end[i-1]);  end[i] = start[i] + C;  release[i] = end[i]

so one stage's round trip (issue, land, read, release, issue again) takes at least L + C, and S stages
overlap S of them: in steady state a tile leaves every ``max(C, T, P, (L + C) / S)`` -- consumer-bound,
bandwidth-bound, issue-bound, or latency-bound (the largest cycle of this max-plus system; the tests
check the simulation against it). More stages only help while the last term is the largest (Little's law: the bytes in
flight, S x stage bytes, must cover latency x bandwidth); after that the curve is flat.

The picture also carries the mbarrier bookkeeping: tile i's consumer waits on ``full[i % S]`` with parity
``lap % 2``; the producer, before reusing the stage, waits on ``empty[i % S]`` with parity ``lap % 2 ^ 1``
(a fresh barrier counts its "previous" phase, parity 1, as complete, so lap 0 passes at once).

Marks carry ``data-*`` attributes: ``class="load"|"full"|"use"`` (a stage row: being filled, full and
waiting, being read) and ``class="issue"|"busy"`` with ``data-item``, ``data-stage``, ``data-lap``,
``data-parity``, ``data-start``, ``data-end``; the sweep chart's points ``class="model"|"measured"`` with
``data-stages`` and ``data-gbps``.

Public API: ``simulate(stages, latency, consume, transfer=0, issue=0, tiles=12) -> Timeline``,
``steady_period(...)``, ``timeline_svg(timeline)``, ``sweep(...)``, ``sweep_svg(model, measured=None)``,
``phase_table(stages, tiles)``. The explorer is in ``ring_explorer.py``; ``pipeline.py`` names both.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from .draw import DISPLAY_SCALE, FIT, FONT

COLORS = {"load": "#8fb5de", "full": "#d8e6f3", "use": "#f0a35e", "issue": "#3b6ea8", "busy": "#f0a35e"}


@dataclass(frozen=True)
class Tile:
    """One tile's trip through the ring (µs)."""

    i: int
    stage: int
    lap: int
    issue: float
    land: float
    start: float
    end: float

    @property
    def full_parity(self) -> int:
        """The parity the consumer waits for on full[stage]: the lap's."""
        return self.lap % 2

    @property
    def empty_parity(self) -> int:
        """The parity the producer waits for on empty[stage] before issuing this tile: the lap's, flipped."""
        return self.lap % 2 ^ 1


@dataclass(frozen=True)
class Timeline:
    """The simulated ring: parameters, every tile, and the steady-state period (µs per tile)."""

    stages: int
    latency: float
    consume: float
    transfer: float
    issue_cost: float
    tiles: list[Tile]

    @property
    def total(self) -> float:
        return self.tiles[-1].end if self.tiles else 0.0

    @property
    def period(self) -> float:
        """Time between tiles once the ring runs steadily: over the last whole laps of the second half of the
        simulation (tiles may leave in bursts of one lap)."""
        t = self.tiles
        span = (len(t) // 2) // self.stages * self.stages
        if span == 0:
            return self.total / max(len(t), 1)
        return (t[-1].end - t[-1 - span].end) / span

    @property
    def limiter(self) -> str:
        """Which term of the steady-state formula is the largest."""
        terms = _terms(self.stages, self.latency, self.consume, self.transfer, self.issue_cost)
        return max(terms, key=lambda k: terms[k])


def _check(stages: int, latency: float, consume: float, transfer: float, issue: float, tiles: int) -> None:
    if not 1 <= stages <= 64:
        raise ValueError(f"stages must be 1..64, got {stages}")
    if min(latency, consume, transfer, issue) < 0:
        raise ValueError("times cannot be negative")
    if latency + consume + transfer + issue <= 0:
        raise ValueError("at least one of the times must be positive")
    if not 1 <= tiles <= 1000:
        raise ValueError(f"tiles must be 1..1000, got {tiles}")


def simulate(stages: int, latency: float, consume: float, transfer: float = 0.0, issue: float = 0.0,
             tiles: int = 12) -> Timeline:
    """Run the model of the module docstring for ``tiles`` tiles through ``stages`` stages."""
    _check(stages, latency, consume, transfer, issue, tiles)
    out: list[Tile] = []
    for i in range(tiles):
        free = out[i - stages].end if i >= stages else 0.0
        t_issue = max(out[i - 1].issue + issue if out else 0.0, free)
        land = max(t_issue + latency, out[i - 1].land + transfer if out else 0.0)
        start = max(land, out[i - 1].end if out else 0.0)
        out.append(Tile(i, i % stages, i // stages, t_issue, land, start, start + consume))
    return Timeline(stages, latency, consume, transfer, issue, out)


def _terms(stages: int, latency: float, consume: float, transfer: float, issue: float) -> dict[str, float]:
    return {"consumer-bound": consume, "bandwidth-bound": transfer, "issue-bound": issue,
            "latency-bound": (latency + consume) / stages}


def steady_period(stages: int, latency: float, consume: float, transfer: float = 0.0, issue: float = 0.0) -> float:
    """The model's steady-state time per tile: max(C, T, P, (L + C) / S)."""
    return max(_terms(stages, latency, consume, transfer, issue).values())


def phase_table(stages: int, tiles: int) -> list[dict[str, int]]:
    """For each tile: its stage, lap, and the parities its consumer and its producer wait on."""
    if stages < 1 or tiles < 0:
        raise ValueError("stages must be positive and tiles not negative")
    return [{"tile": i, "stage": i % stages, "lap": i // stages, "consumer waits full parity": (i // stages) % 2,
             "producer waits empty parity": (i // stages) % 2 ^ 1} for i in range(tiles)]


# ---- drawing -------------------------------------------------------------------------------------------
def _text(x: float, y: float, s: str, *, anchor: str = "start", size: int = 10, fill: str = "#222",
          weight: str = "normal") -> str:
    extra = (f' text-anchor="{anchor}"' if anchor != "start" else "") + \
        (f' font-weight="{weight}"' if weight != "normal" else "")
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}"{extra}>{escape(s)}</text>'


def _svg(width: float, height: float, body: list[str]) -> str:
    """Shown DISPLAY_SCALE times the drawing's size, as draw.py's pictures are: the 8-9 unit labels read at
    10-11 px."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * DISPLAY_SCALE:g}" '
            f'height="{height * DISPLAY_SCALE:g}" viewBox="0 0 {width:.0f} {height:.0f}" '
            f'style="{FONT};font-size:10px;{FIT}">' + "".join(body) + "</svg>")


def _ticks(span: float) -> float:
    """A round tick step giving 4-10 ticks over span."""
    step = 10.0 ** int(f"{span:e}".split("e")[1])
    for f in (1, 2, 5, 10):
        if span / (step * f / 10) <= 10:
            return step * f / 10
    return step


def timeline_svg(tl: Timeline, *, width: int = 760, title: str | None = None, unit: str = "µs") -> str:
    """Producer, one row per stage, consumer; time across. See the module docstring for the marks. ``unit``
    names the time unit of the model's numbers (a trace's clock counts steps, not µs)."""
    left, top, row = 92, 50 if title is None else 66, 22
    rows = tl.stages + 2
    span = tl.total or 1.0
    scale = (width - left - 16) / span
    body: list[str] = []
    if title:
        body.append(_text(left, 16, title, weight="bold", size=12))
    summary = f"{tl.stages} stage{'s' if tl.stages > 1 else ''}: a tile every {tl.period:.3g} {unit} ({tl.limiter})"
    body.append(_text(left, top - 26, summary, size=11))
    body.append(_text(left, top - 12, f"latency L = {tl.latency:g}, read C = {tl.consume:g}, transfer T = "
                      f"{tl.transfer:g}, issue P = {tl.issue_cost:g} ({unit})", size=9, fill="#555"))

    def x(t: float) -> float:
        return left + t * scale

    def mark(cls: str, t: Tile, y: float, t0: float, t1: float, h: float = row - 4) -> str:
        w = max(x(t1) - x(t0), 1.0)
        tip = (f"tile {t.i}, stage {t.stage}, lap {t.lap}: {cls} {t0:.3g}-{t1:.3g} {unit}; consumer waits "
               f"full[{t.stage}] parity {t.full_parity}, producer waited empty[{t.stage}] parity {t.empty_parity}")
        return (f'<rect class="{cls}" data-item="{t.i}" data-stage="{t.stage}" data-lap="{t.lap}" '
                f'data-parity="{t.full_parity}" data-start="{t0:.6g}" data-end="{t1:.6g}" x="{x(t0):.1f}" '
                f'y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{COLORS[cls]}" stroke="#fff">'
                f"<title>{escape(tip)}</title></rect>")

    labels = ["producer"] + [f"stage {s}" for s in range(tl.stages)] + ["consumer"]
    for r, name in enumerate(labels):
        body.append(_text(left - 6, top + r * row + row * 0.62, name, anchor="end", size=9, fill="#444"))
        body.append(f'<line x1="{left}" y1="{top + (r + 1) * row - 1}" x2="{width - 16}" '
                    f'y2="{top + (r + 1) * row - 1}" stroke="#eee"/>')
    for t in tl.tiles:
        y_stage = top + (1 + t.stage) * row + 2
        body.append(mark("issue", t, top + 6, t.issue, t.issue + max(tl.issue_cost, span / 300), row - 12))
        body.append(mark("load", t, y_stage, t.issue, t.land))
        if t.start > t.land:
            body.append(mark("full", t, y_stage, t.land, t.start))
        body.append(mark("use", t, y_stage, t.start, t.end))
        if x(t.end) - x(t.issue) > 34:
            body.append(_text((x(t.issue) + x(t.end)) / 2, y_stage + row * 0.55, f"{t.i} p{t.full_parity}",
                              anchor="middle", size=8))
        body.append(mark("busy", t, top + (rows - 1) * row + 2, t.start, t.end))
    axis_y = top + rows * row + 4
    step = _ticks(span)
    k = 0
    while k * step <= span + 1e-9:
        body.append(_text(x(k * step), axis_y + 10, f"{k * step:g}", anchor="middle", size=8, fill="#666"))
        k += 1
    body.append(_text(width - 16, axis_y + 22, f"time ({unit})", anchor="end", size=8, fill="#666"))
    legend = [("load", "being filled (TMA in flight)"), ("full", "full, waiting for the consumer"),
              ("use", "being read; then released"), ("issue", "producer issues")]
    lx = left
    for cls, what in legend:
        body.append(f'<rect x="{lx}" y="{axis_y + 30}" width="10" height="10" fill="{COLORS[cls]}"/>')
        body.append(_text(lx + 14, axis_y + 39, what, size=9))
        lx += 22 + int(5.5 * len(what))
    body.append(_text(left, axis_y + 56, "\"5 p0\": tile 5, its consumer waits for parity 0 on full[stage]; "
                      "the producer, for parity 1 on empty[stage]", size=9, fill="#555"))
    return _svg(width, axis_y + 64, body)


def sweep(stages: tuple[int, ...], latency: float, consume: float, transfer: float = 0.0, issue: float = 0.0,
          stage_bytes: int = 16384, sms: int = 132) -> dict[int, float]:
    """The model's copy bandwidth (GB/s, read + write, all SMs) for each stage count."""
    out = {}
    for s in stages:
        period = steady_period(s, latency, consume, transfer, issue)
        out[s] = 2 * stage_bytes * sms / (period * 1e-6) / 1e9
    return out


def sweep_svg(model: dict[int, float], measured: dict[int, float] | None = None, *, ceiling: float | None = None,
              width: int = 420, height: int = 220) -> str:
    """GB/s against stages: the model as a line of dots, measured points as squares, a copy ceiling dashed."""
    left, top, bottom, right = 52, 24, 36, 12
    xs = sorted(set(model) | set(measured or {}))
    ys = list(model.values()) + list((measured or {}).values()) + ([ceiling] if ceiling else [])
    y_max = max(ys) * 1.1 if ys else 1.0
    pw, ph = width - left - right, height - top - bottom

    def px(s: int) -> float:
        return left + (xs.index(s) + 0.5) * pw / len(xs)

    def py(v: float) -> float:
        return top + ph - v / y_max * ph

    body = [_text(left, 14, "copy bandwidth vs stages (GB/s, read + write)", size=11),
            f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#ccc"/>']
    step = _ticks(y_max)
    k = 0
    while k * step <= y_max:
        body.append(_text(left - 4, py(k * step) + 3, f"{k * step:g}", anchor="end", size=8, fill="#666"))
        k += 1
    if ceiling:
        y = py(ceiling)
        body.append(f'<line class="ceiling" data-gbps="{ceiling:.6g}" x1="{left}" x2="{left + pw}" y1="{y:.1f}" '
                    f'y2="{y:.1f}" stroke="#888" stroke-dasharray="4 3"/>')
        body.append(_text(left + 4, py(ceiling) - 3, "device copy", size=8, fill="#666"))  # left: few stages, low
    pts = [f"{px(s):.1f},{py(v):.1f}" for s, v in sorted(model.items())]
    if len(pts) > 1:
        body.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="#3b6ea8"/>')
    for s, v in sorted(model.items()):
        body.append(f'<circle class="model" data-stages="{s}" data-gbps="{v:.6g}" cx="{px(s):.1f}" cy="{py(v):.1f}" '
                    f'r="3" fill="#3b6ea8"><title>model: {s} stages, {v:.0f} GB/s</title></circle>')
    for s, v in sorted((measured or {}).items()):
        body.append(f'<rect class="measured" data-stages="{s}" data-gbps="{v:.6g}" x="{px(s) - 4:.1f}" '
                    f'y="{py(v) - 4:.1f}" width="8" height="8" fill="#f0a35e"><title>measured: {s} stages, '
                    f'{v:.0f} GB/s</title></rect>')
    for s in xs:
        body.append(_text(px(s), top + ph + 12, str(s), anchor="middle", size=9, fill="#444"))
    body.append(_text(left + pw / 2, height - 6, "stages" + ("   ● model   ■ measured" if measured else "   ● model"),
                      anchor="middle", size=9, fill="#444"))
    return _svg(width, height, body)
