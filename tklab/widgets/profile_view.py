"""The picture of a profile (``tklab.profile``): where the kernel sits on the roofline, how busy each unit is,
and what its warps wait on. One deterministic SVG string, drawn from ``ProfileResult`` alone.

Three panels, left to right:

- **roofline** (log-log): FLOP per DRAM byte across, TFLOP/s up; the copy-bandwidth slope and the compute
  ceilings of this GPU (the one the kernel is read against solid, the other dashed); the kernel is a dot.
- **units busy**: tensor pipe, FMA pipe, shared memory, DRAM, L2 as % busy, with the line at which
  ``tklab.profile`` calls a unit the limiter (the result's ``bound_pct``: this module imports nothing from
  ``tklab.profile``, which imports it); the limiting unit is drawn dark.
- **warps wait on**: the stall reasons, largest first, as shares of stall cycles.

Marks carry ``data-*`` attributes (``kernel-point``: ``data-intensity``, ``data-tflops``; ``roof``:
``data-kind`` and its rate; ``busy``: ``data-unit``, ``data-pct``; ``stall``: ``data-reason``,
``data-share``), so tests and curious learners can read the figure back.

Public API: ``profile_svg(result) -> str``, ``roofline_range(points) -> (x0, x1, y0, y1)``.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from .draw import FIT, FONT

PANEL_H = 190
TOP = 28
ROOF_W, BUSY_W, STALL_W = 250, 190, 230
GAP = 50
DARK, LIGHT, GRID = "#3b6ea8", "#a9c1dd", "#e3e3e3"


def _text(x: float, y: float, s: str, *, anchor: str = "start", size: int = 10, fill: str = "#222",
          weight: str = "normal") -> str:
    extra = (f' text-anchor="{anchor}"' if anchor != "start" else "") + \
        (f' font-weight="{weight}"' if weight != "normal" else "")
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}"{extra}>{escape(s)}</text>'


def _decades(lo: float, hi: float) -> tuple[int, int]:
    return math.floor(math.log10(lo)), math.ceil(math.log10(hi))


def roofline_range(xs: list[float], ys: list[float]) -> tuple[int, int, int, int]:
    """Whole decades (log10) that hold every x (FLOP/byte) and y (TFLOP/s) given, with a little margin."""
    x0, x1 = _decades(min(xs) / 1.25, max(xs) * 1.25)
    y0, y1 = _decades(min(ys) / 1.25, max(ys) * 1.25)
    return x0, max(x1, x0 + 1), y0, max(y1, y0 + 1)


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _tick(decade: int) -> str:
    """Axis label of 10**decade: plain from 0.001 to 1000, else 1e4."""
    return f"{10.0**decade:g}" if -3 <= decade <= 3 else f"1e{decade}"


#: Every roofline shows at least this much (FLOP/byte, TFLOP/s), so kernels of different chapters share axes.
DEFAULT_VIEW = ((0.125, 800.0), (1.25, 800.0))


def roofline_axes(r: Any) -> tuple[int, int, int, int]:
    """The decades (log10 of x0, x1, y0, y1) the roofline of ``r`` spans: the default view, widened to hold
    the kernel's point and the ridge points of the ceilings."""
    c = r.ceilings()
    bw = c.copy_tbps if c is not None else None
    peaks = [v for k in ("bf16_tensor", "fp32_simt") if c is not None and (v := getattr(c, f"{k}_tflops", None))]
    xs, ys = list(DEFAULT_VIEW[0]), list(DEFAULT_VIEW[1]) + peaks
    if bw:
        xs += [v / bw for v in peaks]
    if r.intensity and r.tflops:
        xs.append(r.intensity)
        ys.append(r.tflops)
    return roofline_range(xs, ys)


def _roofline(r: Any, left: float) -> list[str]:
    body: list[str] = [_text(left - 40, TOP - 10, "roofline", size=11, weight="bold"),
                       _text(left + 28, TOP - 10, "TFLOP/s up, FLOP per DRAM byte across", size=9, fill="#444")]
    c = r.ceilings()
    bw = c.copy_tbps if c is not None else None
    roofs = [(k, getattr(c, f"{k}_tflops", None)) for k in ("bf16_tensor", "fp32_simt")] if c is not None else []
    roofs = [(k, v) for k, v in roofs if v]
    x, y = r.intensity, r.tflops
    x0, x1, y0, y1 = roofline_axes(r)
    w, h = ROOF_W, PANEL_H

    def px(v: float) -> float:
        return left + (math.log10(v) - x0) / (x1 - x0) * w

    def py(v: float) -> float:
        return TOP + h - (math.log10(v) - y0) / (y1 - y0) * h

    body.append(f'<rect x="{left}" y="{TOP}" width="{w}" height="{h}" fill="#fff" stroke="#999"/>')
    for d in range(x0, x1 + 1):
        gx = px(10.0**d)
        body.append(f'<line x1="{gx:.1f}" y1="{TOP}" x2="{gx:.1f}" y2="{TOP + h}" stroke="{GRID}"/>')
        body.append(_text(gx, TOP + h + 12, _tick(d), anchor="middle", size=8, fill="#666"))
    for d in range(y0, y1 + 1):
        gy = py(10.0**d)
        body.append(f'<line x1="{left}" y1="{gy:.1f}" x2="{left + w}" y2="{gy:.1f}" stroke="{GRID}"/>')
        body.append(_text(left - 4, gy + 3, _tick(d), anchor="end", size=8, fill="#666"))
    body.append(_text(left + w / 2, TOP + h + 24, "FLOP per DRAM byte", anchor="middle", size=9, fill="#444"))
    lo, hi = 10.0**x0, 10.0**x1
    for kind, peak in roofs:
        solid = kind == r.peak
        ridge = peak / bw if bw else lo
        xa = max(lo, min(ridge, hi))
        dash = "" if solid else ' stroke-dasharray="4 3"'
        body.append(f'<line class="roof" data-kind="{kind}" data-tflops="{_fmt(peak)}" x1="{px(xa):.1f}" '
                    f'y1="{py(peak):.1f}" x2="{px(hi):.1f}" y2="{py(peak):.1f}" stroke="{DARK if solid else LIGHT}" '
                    f'stroke-width="{2 if solid else 1.5}"{dash}/>')
        body.append(_text(px(hi) - 3, py(peak) - 4, f"{kind.replace('_', ' ')} {peak:g}", anchor="end", size=8,
                          fill=DARK if solid else "#778"))
    if bw:
        top_peak = max((v for _, v in roofs), default=bw * hi)
        xb = min(hi, top_peak / bw)
        xa = max(lo, 10.0**y0 / bw)
        body.append(f'<line class="roof" data-kind="dram" data-tbps="{_fmt(bw)}" x1="{px(xa):.1f}" '
                    f'y1="{py(bw * xa):.1f}" x2="{px(xb):.1f}" y2="{py(bw * xb):.1f}" stroke="{DARK}" '
                    'stroke-width="2"/>')
        body.append(_text(px(xa) + 4, py(bw * xa) - 6, f"copy {bw:.3g} TB/s", size=8, fill=DARK))
    if x and y:
        body.append(f'<circle class="kernel-point" data-intensity="{_fmt(x)}" data-tflops="{_fmt(y)}" '
                    f'cx="{px(x):.1f}" cy="{py(y):.1f}" r="5" fill="#d1495b" stroke="#fff">'
                    f"<title>{escape(f'{y:.3g} TFLOP/s at {x:.3g} FLOP/byte')}</title></circle>")
        below = py(y) < TOP + h - 20
        body.append(_text(px(x) + 7, py(y) + (12 if below else -7), f"{y:.3g} TFLOP/s", size=9, fill="#d1495b"))
    else:
        why = "pass flops= to place the kernel" if not y else "ncu reported no DRAM traffic"
        body.append(_text(left + w / 2, TOP + h / 2, why, anchor="middle", size=9, fill="#888"))
    return body


def _bars(title: str, left: float, width: float, items: list[tuple[str, float, str, str]], cls: str,
          threshold: float | None = None) -> list[str]:
    """Horizontal bars: items are (label, value 0..100, colour, data attributes)."""
    body = [_text(left, TOP - 10, title, size=11, weight="bold")]
    label_w, row = 92, 22
    bar_w = width - label_w - 34
    if not items:
        body.append(_text(left, TOP + 20, "not reported", size=9, fill="#888"))
        return body
    for i, (label, value, colour, data) in enumerate(items):
        y = TOP + 6 + i * row
        body.append(_text(left + label_w - 4, y + 11, label, anchor="end", size=9))
        body.append(f'<rect x="{left + label_w}" y="{y}" width="{bar_w}" height="14" fill="#f2f2f2"/>')
        length = max(0.0, min(value, 100.0)) / 100 * bar_w
        body.append(f'<rect class="{cls}" {data} x="{left + label_w}" y="{y}" width="{length:.1f}" height="14" '
                    f'fill="{colour}"/>')
        body.append(_text(left + label_w + bar_w + 3, y + 11, f"{value:.0f} %", size=9))
    if threshold is not None:
        tx = left + label_w + threshold / 100 * bar_w
        y_end = TOP + 6 + len(items) * row - 8
        body.append(f'<line class="bound-line" x1="{tx:.1f}" y1="{TOP + 2}" x2="{tx:.1f}" y2="{y_end}" '
                    'stroke="#d1495b" stroke-dasharray="3 2"/>')
        body.append(_text(tx, y_end + 10, f"bound at {threshold:.0f} %", anchor="middle", size=8, fill="#d1495b"))
    return body


def _busy(r: Any, left: float) -> list[str]:
    busy = r.units_busy()
    lim = r.limiter.kind
    names = {"tensor pipe": "tensor", "FMA pipe": "fma", "shared memory": "shared", "DRAM": "dram", "L2": "l2"}
    items = [(u, v, DARK if names[u] == lim else LIGHT, f'data-unit="{escape(u)}" data-pct="{v:.2f}"')
             for u, v in busy.items()]
    return _bars("units busy", left, BUSY_W, items, "busy", r.bound_pct)


def _stalls(r: Any, left: float, shown: int = 6) -> list[str]:
    stalls = r.top_stalls(len(r.stalls), waiting_only=True)
    items = [(s.reason.replace("_", " "), 100 * s.share, DARK if i == 0 else LIGHT,
              f'data-reason="{s.reason}" data-share="{s.share:.4f}"') for i, s in enumerate(stalls[:shown])]
    rest = stalls[shown:]
    if rest:
        share = sum(s.share for s in rest)
        items.append((f"{len(rest)} others", 100 * share, "#ccc", f'data-reason="other" data-share="{share:.4f}"'))
    title = "warps wait on (% of stall cycles)"
    return _bars(title, left, STALL_W, items, "stall")


def profile_svg(r: Any) -> str:
    """The three panels for a ``tklab.profile.ProfileResult`` (see the module docstring)."""
    left1 = 48
    left2 = left1 + ROOF_W + GAP
    left3 = left2 + BUSY_W + GAP
    width = left3 + STALL_W + 10
    height = TOP + PANEL_H + 48
    body = [*_roofline(r, left1), *_busy(r, left2), *_stalls(r, left3)]
    caption = f"{r.label or r.kernel} — {r.origin}"
    body.append(_text(left1 - 40, height - 6, caption, size=8, fill="#666"))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="tklab-profile" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" style="{FONT};font-size:10px;{FIT}">' + "".join(body) + "</svg>")
