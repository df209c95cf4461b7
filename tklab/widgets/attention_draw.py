"""Pictures for the attention chapters, drawn from the models the tests check: which blocks of the score
matrix a kernel computes (``tklab.kernels.attention.block_map``), and how warpgroups share the tensor cores
(``tklab.models.schedules.simulate``). Deterministic SVG strings with ``data-*`` attributes, like draw.py; the
explorers wire ipywidgets sliders to them.

Public API: ``block_map_svg(seq, block_rows, block_keys, causal)``, ``timeline_svg(timeline)``,
``block_stats(...)``, ``block_choices()``. The explorers are in ``attention_explorer.py``; ``attention_view.py``
names both (the notebooks' name).
"""

from __future__ import annotations

from html import escape
from typing import Any

from ..kernels import attention
from ..models import schedules
from .draw import _svg, _text, text_width

COLORS = {attention.FULL: "#4e79a7", attention.MASKED: "#f28e2b", attention.SKIPPED: "#e6e6e6"}
NAMES = {attention.FULL: "computed", attention.MASKED: "computed, partly masked", attention.SKIPPED: "skipped"}
SPAN_COLORS = {"S": "#4e79a7", "PV": "#59a14f", "X": "#f28e2b"}


def block_stats(seq: int, block_rows: int, block_keys: int, causal: bool) -> dict[str, Any]:
    """Counts behind the picture, and the bytes of one head (d = 128) by ``attention.traffic``."""
    m = attention.block_map(seq, block_rows, block_keys, causal)
    t = attention.traffic(1, 1, seq, 128, block_rows=block_rows, block_keys=block_keys, causal=causal)
    return {"blocks": m.size, "full": int((m == attention.FULL).sum()), "masked": int((m == attention.MASKED).sum()),
            "skipped": int((m == attention.SKIPPED).sum()), **t}


def block_map_svg(seq: int, block_rows: int, block_keys: int, causal: bool, *, max_side: int = 420) -> str:
    """Query blocks down, key blocks across; each cell coloured by what the kernel does with it. The drawing
    is as wide as its widest text, so a narrow grid (long blocks, short sequences) never clips the words."""
    m = attention.block_map(seq, block_rows, block_keys, causal)
    nq, nk = m.shape
    cell = max(3, min(28, max_side // max(nq, nk)))
    left, top = 60, 36
    s = block_stats(seq, block_rows, block_keys, causal)
    title = (f"seq {seq}: {nq} query blocks of {block_rows} rows × {nk} key blocks of {block_keys}"
             f"{', causal' if causal else ''}")
    legend = [(v, f"{NAMES[v]}: {s[k]}") for v, k in ((attention.FULL, "full"), (attention.MASKED, "masked"),
                                                      (attention.SKIPPED, "skipped"))]
    ratio = s["naive_hbm"] / s["flash_hbm"]
    footer = [f"device memory, one head, d = 128: naive {s['naive_hbm'] / 1e6:.1f} MB (S and P written and read),",
              f"FlashAttention {s['flash_hbm'] / 1e6:.2f} MB ({ratio:.0f}× less); from L2 into the SMs: "
              f"{s['flash_l2'] / 1e6:.1f} MB",
              "(each visited key block's K and V, once per query block)"]
    legend_w = sum(14 + text_width(label) + 12 for _, label in legend)
    w = int(max(left + nk * cell + 10, 16 + text_width(title, 11), left + legend_w,
                left + max(text_width(line) for line in footer) + 10, left + text_width("key blocks →") + 10))
    h = top + nq * cell + 84
    body = [_text(w / 2, 14, title, size=11),
            _text(left, 28, "key blocks →", size=10, anchor="start") if nk * cell < 80 else
            _text(left + nk * cell / 2, 28, "key blocks →", size=10),
            _text(left - 6, top + nq * cell / 2, "query", anchor="end", size=10)]
    for i in range(nq):
        for j in range(nk):
            v = int(m[i, j])
            body.append(f'<rect class="block" data-q="{i}" data-k="{j}" data-state="{NAMES[v]}" '
                        f'x="{left + j * cell}" y="{top + i * cell}" width="{cell - 1}" height="{cell - 1}" '
                        f'fill="{COLORS[v]}"/>')
    y = top + nq * cell + 18
    x = left
    for v, label in legend:
        body.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{COLORS[v]}"/>')
        body.append(_text(x + 14, y, label, anchor="start", size=10))
        x += 14 + text_width(label) + 12
    for k, line in enumerate(footer):
        body.append(_text(left, y + 20 + 16 * k, line, anchor="start", size=10))
    return _svg(w, h, body)


#: The rows of one warpgroup: its products on the tensor cores, S and P·V each in a row of its own (in the
#: overlapped schedules they run at the same time, and one box must not hide the other), then its softmax.
ROWS = (("S", "tensor", "S = Q·Kᵀ"), ("PV", "tensor", "O += P·V"), ("X", "sfu", "softmax"))


def timeline_svg(tl: schedules.Timeline, *, scale: float | None = None, width: int = 760) -> str:
    """One row per warpgroup and kind of work (S, P·V, softmax), time across; the tensor cores' busy share in
    the title. A box's label is drawn inside it only where it fits, so no two labels ever overlap."""
    groups = sorted({s.group for s in tl.spans})
    rows = [(g, kind, unit, what) for g in groups for kind, unit, what in ROWS]
    left, top, row_h = 170, 30, 20
    px = scale or (width - left - 20) / max(tl.end, 1e-9)
    h = top + len(rows) * row_h + 40
    title = f"{tl.schedule}: tensor cores busy {tl.tensor_busy:.0%} of {tl.end:.1f} time units"
    body = [_text(left, 16, title, anchor="start", size=12, weight="bold")]
    for r, (g, kind, unit, what) in enumerate(rows):
        y = top + r * row_h
        body.append(_text(left - 8, y + 14, f"warpgroup {g}: {what}", anchor="end", size=10))
        body.append(f'<line x1="{left}" y1="{y + row_h - 1}" x2="{left + tl.end * px:.1f}" y2="{y + row_h - 1}" '
                    f'stroke="{"#bbb" if kind == "X" else "#eee"}"/>')
        for s in (s for s in tl.spans if s.group == g and s.unit == unit and _kind(s.label) == kind):
            x0, x1 = left + s.start * px, left + s.end * px
            body.append(f'<rect class="span" data-group="{g}" data-unit="{unit}" data-label="{escape(s.label)}" '
                        f'data-start="{s.start:g}" data-end="{s.end:g}" x="{x0:.1f}" y="{y + 2}" '
                        f'width="{max(x1 - x0 - 1, 1):.1f}" height="{row_h - 5}" fill="{SPAN_COLORS[kind]}"/>')
            if x1 - x0 - 1 >= text_width(s.label, 9) + 4:
                body.append(_text((x0 + x1) / 2, y + 13, s.label, size=9, fill="#fff"))
    y = top + len(rows) * row_h + 20
    legend = [("S", "S = Q·Kᵀ"), ("PV", "O += P·V"), ("X", "softmax (exponentials)")]
    x = left
    for kind, label in legend:
        body.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{SPAN_COLORS[kind]}"/>')
        body.append(_text(x + 14, y, label, anchor="start", size=10))
        x += 30 + text_width(label)
    title_w = left + text_width(f"{tl.schedule}: tensor cores busy 100% of {tl.end:.1f} time units", 12) + 10
    return _svg(int(max(left + tl.end * px + 20, x + 10, title_w)), h, body)


def _kind(label: str) -> str:
    """A span's kind from its label: S3 -> "S", PV2 -> "PV", X3 -> "X"."""
    return "PV" if label.startswith("PV") else label[0]


def block_choices() -> tuple[list[int], list[int]]:
    """(query rows, keys) per block the explorer offers: a few small shapes and every shipped kernel's own
    (read from ``attention.DEFAULTS``, their one home)."""
    shipped = [attention.build(k, d) for k, per_d in attention.DEFAULTS.items() for d in per_d]
    return (sorted({64, 128} | {b.block_rows for b in shipped}),
            sorted({32, 64, 128} | {b.option("BC") for b in shipped}))
