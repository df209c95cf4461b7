"""Deterministic SVG drawings of the bank and layout models (strings: testable, and they survive HTML export).

Every picture is drawn from the same model the tests check against hardware (``tklab.models.banks``,
``tklab.models.layouts``); cells carry ``data-*`` attributes (lane, bank, wavefront, element) so a test, or a
curious learner, can read the figure back without a browser.
"""

from __future__ import annotations

from collections import defaultdict
from html import escape

from ..models import banks, layouts

CELL = 22  # px, one bank (or one matrix element)
FONT = "font-family:ui-monospace,Menlo,Consolas,monospace"
#: Every drawing shrinks to fit a narrow page (a notebook's column beside the file browser), keeping its
#: proportions; it is never drawn larger than its own size.
FIT = "max-width:100%;height:auto"


def lane_color(lane: int, *, faded: bool = False) -> str:
    """A colour per lane: hues spread so that neighbouring lanes differ; lightness alternates by quad."""
    hue = (lane * 7 % 32) * 360 // 32
    light = 88 if faded else (58 if (lane // 4) % 2 == 0 else 70)
    sat = 25 if faded else 70
    return f"hsl({hue},{sat}%,{light}%)"


#: Screen pixels per drawing unit: the drawings are laid out on a 22-unit cell and shown 25 % larger, so
#: their smallest labels (8-9 units) read at 10-11 px.
DISPLAY_SCALE = 1.25


def _svg(width: int, height: int, body: list[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * DISPLAY_SCALE:g}" '
            f'height="{height * DISPLAY_SCALE:g}" viewBox="0 0 {width} {height}" style="{FONT};font-size:10px;{FIT}">'
            + "".join(body) + "</svg>")


def _text(x: float, y: float, s: str, *, anchor: str = "middle", size: int = 10, weight: str = "normal",
          fill: str = "#222") -> str:
    extra = (f' text-anchor="{anchor}"' if anchor != "start" else "") + \
        (f' font-weight="{weight}"' if weight != "normal" else "") + (f' fill="{fill}"' if fill != "#222" else "")
    return f'<text x="{x:g}" y="{y:g}" font-size="{size}"{extra}>{escape(s)}</text>'


#: Width of one character as a share of the font size: a generous estimate for the sans-serif fonts the
#: drawings use (Helvetica/DejaVu digits are 0.55-0.64 em), so a drawing sized by it never clips its text.
CHAR_EM = 0.64


def text_width(s: str, size: float = 10) -> float:
    """Estimated width of ``s`` at ``size`` (SVG units): what a drawing must leave room for."""
    return CHAR_EM * size * len(s)


def text_boxes(svg: str) -> list[tuple[str, float, float, float, float]]:
    """Each text of a drawing with its estimated box, (text, x0, y0, x1, y1): what a test needs to see that no
    two labels are drawn over each other."""
    import xml.etree.ElementTree as ET

    out = []
    for el in ET.fromstring(svg).iter():
        if el.tag.rsplit("}", 1)[-1] != "text":
            continue
        size = float(el.get("font-size", 10))
        x, y, t = float(el.get("x", 0)), float(el.get("y", 0)), "".join(el.itertext())
        w = text_width(t, size)
        x0 = {"middle": x - w / 2, "end": x - w}.get(el.get("text-anchor", "start"), x)
        out.append((t, x0, y - 0.8 * size, x0 + w, y + 0.25 * size))
    return out


def outside(svg: str) -> list[str]:
    """Texts and rectangles of a drawing that reach past its viewBox (estimated text widths): [] when all fit."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(svg)
    _, _, width, height = (float(v) for v in root.get("viewBox", "0 0 0 0").split())
    bad = []
    for el in root.iter():
        tag = el.tag.rsplit("}", 1)[-1]
        if tag == "text":
            size = float(el.get("font-size", 10))
            x, y, t = float(el.get("x", 0)), float(el.get("y", 0)), "".join(el.itertext())
            w = text_width(t, size)
            x0 = {"middle": x - w / 2, "end": x - w}.get(el.get("text-anchor", "start"), x)
            if x0 < -0.5 or x0 + w > width + 0.5 or y - 0.8 * size < -0.5 or y + 0.25 * size > height + 0.5:
                bad.append(f"text {t!r} at x {x0:.0f}..{x0 + w:.0f}, y {y:g} in a {width:g}x{height:g} drawing")
        elif tag == "rect":
            x, y = float(el.get("x", 0)), float(el.get("y", 0))
            w, h = float(el.get("width", 0)), float(el.get("height", 0))
            if x < -0.5 or y < -0.5 or x + w > width + 0.5 or y + h > height + 0.5:
                bad.append(f"rect at {x:g},{y:g} size {w:g}x{h:g} in a {width:g}x{height:g} drawing")
    return bad


def ncu_numbers(access: banks.Access) -> dict[str, int]:
    """What Nsight Compute would report for this one instruction (per the measured model)."""
    side = "st" if access.op in ("st", "stmatrix") else "ld"
    return {
        f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{side}.sum": access.wavefronts,
        f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{side}.sum": access.conflicts,
    }


def bank_svg(access: banks.Access, *, title: str | None = None) -> str:
    """32 banks across, one row per wavefront; a cell is coloured by the lane it serves (lowest, if shared).

    Below the grid, the 32 lanes with the wavefront(s) that serve each. Cells: ``class="cell"`` with
    ``data-wave``, ``data-bank``, ``data-lane`` (lowest), ``data-lanes`` (all) and ``data-word``.
    """
    left, top = 44, 34 if title is None else 50
    waves = access.waves
    nrows = max(1, len(waves))
    grid_h = nrows * CELL
    lanes_y = top + grid_h + 26
    width, height = left + 32 * CELL + 10, lanes_y + CELL + 44
    body: list[str] = []
    if title:
        body.append(_text(left, 16, title, anchor="start", size=12, weight="bold"))
    ideal = access.ideal
    summary = (f"{access.wavefronts} wavefront{'s' if access.wavefronts != 1 else ''} "
               f"(conflict-free: {ideal}; {access.conflicts} extra) - {access.op} {access.width} B/lane")
    body.append(_text(left, top - 20, summary, anchor="start", size=11))
    for b in range(32):
        body.append(_text(left + b * CELL + CELL / 2, top - 4, str(b), size=8, fill="#666"))
    body.append(_text(left - 6, top - 4, "bank", anchor="end", size=8, fill="#666"))
    for w, wave in enumerate(waves):
        y = top + w * CELL
        body.append(_text(left - 6, y + CELL * 0.68, f"w{w}", anchor="end", size=9, fill="#444"))
        served: dict[int, list[int]] = defaultdict(list)
        words: dict[int, int] = {}
        for r in wave.requests:
            served[r.bank].append(r.lane)
            words[r.bank] = r.word
        for b in range(32):
            x = left + b * CELL
            if b not in served:
                body.append(f'<rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" fill="#f4f4f4" stroke="#ddd"/>')
                continue
            ls = sorted(set(served[b]))
            tip = f"bank {b}, word {words[b]} (byte {4 * words[b]}): lane{'s' if len(ls) > 1 else ''} " + \
                ", ".join(map(str, ls))
            body.append(f'<rect class="cell" data-wave="{w}" data-bank="{b}" data-lane="{ls[0]}" '
                        f'data-lanes="{" ".join(map(str, ls))}" data-word="{words[b]}" x="{x}" y="{y}" '
                        f'width="{CELL}" height="{CELL}" fill="{lane_color(ls[0])}" stroke="#fff">'
                        f"<title>{escape(tip)}</title></rect>")
            label = str(ls[0]) + ("+" if len(ls) > 1 else "")
            body.append(_text(x + CELL / 2, y + CELL * 0.68, label, size=8 if len(label) > 2 else 9))
    if not waves:
        body.append(_text(left + 16 * CELL, top + CELL * 0.68, "no lane takes part", fill="#888"))
    # The lanes, each with the wavefront(s) that serve it.
    body.append(_text(left - 6, lanes_y - 6, "lane", anchor="end", size=8, fill="#666"))
    served_by = access.lane_wavefront()
    for lane in range(32):
        x = left + lane * CELL
        active = access.offsets[lane] is not None
        fill = lane_color(lane) if active else "#fff"
        waves_of = " ".join(map(str, served_by.get(lane, [])))
        tip = f"byte {access.offsets[lane]}" if active else "sits out"
        body.append(f'<rect class="lane" data-lane="{lane}" data-waves="{waves_of}" x="{x}" y="{lanes_y}" '
                    f'width="{CELL}" height="{CELL}" fill="{fill}" stroke="#bbb">'
                    f"<title>lane {lane}: {tip}</title></rect>")
        body.append(_text(x + CELL / 2, lanes_y + CELL * 0.68, str(lane), size=9))
        if active:
            ws = served_by.get(lane, [])
            label = (f"w{ws[0]}" + ("+" if len(ws) > 1 else "")) if ws else ""
            body.append(_text(x + CELL / 2, lanes_y + CELL + 12, label, size=8, fill="#555"))
    phases = " | ".join(f"{p[0]}-{p[-1]}" for p in access.phases)
    body.append(_text(left, height - 6, f"lanes served together (phases): {phases}", anchor="start", size=9,
                      fill="#555"))
    return _svg(width, height, body)


def _grid_shape(frag: layouts.Fragment) -> tuple[int, int]:
    if frag.dims == ("matrix", "row", "col"):
        return 8, 8 * frag.shape[0]
    return frag.shape[0], frag.shape[1]


def _grid_pos(frag: layouts.Fragment, coord: tuple[int, ...]) -> tuple[int, int]:
    if frag.dims == ("matrix", "row", "col"):
        m, r, c = coord
        return r, 8 * m + c
    return coord[0], coord[1]


def layout_svg(frag: layouts.Fragment, *, lane: int | None = None, swizzle: str | None = None,
               max_cols: int = 64, title: str | None = None) -> str:
    """The fragment's matrix, each element coloured by the lane that holds it and labelled ``lane:i``.

    ``lane`` highlights one lane's elements (others fade). ``swizzle`` adds a second panel: the same
    matrix stored as the tile library's shared tile (``layouts.st_offset``) under that swizzle, drawn as
    128-byte lines (32 banks), so you see which bank each of the lane's elements lands in. Wide fragments
    are cut at ``max_cols`` columns. Cells: ``class="elem"`` with ``data-lane``, ``data-i``, ``data-row``,
    ``data-col``; shared-memory cells ``class="smem"`` also ``data-byte`` and ``data-bank``.
    """
    rows, cols = _grid_shape(frag)
    shown = min(cols, max_cols)
    cell = CELL if shown <= 16 else 16 if shown <= 32 else 12
    left, top = 34, 40 if title is None else 56
    width = max(left + shown * cell + 16, 420)
    body: list[str] = []
    if title:
        body.append(_text(left, 16, title, anchor="start", size=12, weight="bold"))
    op = f" {frag.operand}" if frag.operand else ""
    dims = " x ".join(map(str, frag.shape))
    head = f"{frag.name}{op}: {dims} ({', '.join(frag.dims)}), {frag.lanes} lanes x {frag.elements} elements"
    if shown < cols:
        head += f"; columns 0..{shown - 1} of {cols}"
    body.append(_text(left, top - 22, head, anchor="start", size=11))
    width = int(max(width, left + text_width(head, 11) + 8, left + text_width(title or "", 12) + 8))
    where: dict[tuple[int, int], tuple[int, int]] = {}
    for ln in range(frag.lanes):
        for i in range(frag.elements):
            where[_grid_pos(frag, frag.coords(ln, i))] = (ln, i)
    dense = rows * shown > 512  # big fragments: no per-cell labels or tooltips, to keep the SVG small
    small = cell >= CELL and not dense
    for r in range(rows):
        body.append(_text(left - 4, top + r * cell + cell * 0.7, str(r), anchor="end", size=8, fill="#666"))
        for c in range(shown):
            ln, i = where[(r, c)]
            x, y = left + c * cell, top + r * cell
            faded = lane is not None and ln != lane
            stroke = ' stroke="#000" stroke-width="2"' if lane is not None and ln == lane else ' stroke="#fff"'
            tip = "" if dense else (f"<title>lane {ln}, element {i} (register {frag.register_of(i)[0]}): "
                                    f"row {r}, col {c}</title>")
            body.append(f'<rect class="elem" data-lane="{ln}" data-i="{i}" data-row="{r}" data-col="{c}" '
                        f'x="{x}" y="{y}" width="{cell}" height="{cell}" fill="{lane_color(ln, faded=faded)}"{stroke}>'
                        f"{tip}</rect>")
            if small:
                body.append(_text(x + cell / 2, y + cell * 0.47, str(ln), size=9))
                body.append(_text(x + cell / 2, y + cell * 0.9, f":{i}", size=8, fill="#333"))
    for c in range(0, shown, 8 if shown > 16 else 1):
        body.append(_text(left + c * cell + cell / 2, top - 4, str(c), size=8, fill="#666"))
    if frag.dims == ("matrix", "row", "col"):
        for m in range(frag.shape[0]):
            label = f"matrix {m}: lanes {8 * m}-{8 * m + 7}" if 8 * cell >= 120 else f"m{m}: {8 * m}-{8 * m + 7}"
            body.append(_text(left + (8 * m + 4) * cell, top + rows * cell + 14, label, size=9, fill="#555"))
    height = top + rows * cell + 26
    if swizzle is not None:
        body, height, width = _smem_panel(frag, body, height, width, lane=lane, swizzle=swizzle, max_cols=shown,
                                          dense=dense)
    return _svg(width, height, body)


def _smem_panel(frag: layouts.Fragment, body: list[str], y0: int, width: int, *, lane: int | None,
                swizzle: str, max_cols: int, dense: bool) -> tuple[list[str], int, int]:
    """Second panel: where each element sits in a shared tile of the fragment's shape, by bank."""
    if frag.dims == ("matrix", "row", "col"):
        rows, cols = 8, 8 * frag.shape[0]
    else:
        rows, cols = frag.shape
    itemsize = frag.bits // 8
    per_word = 4 // itemsize
    offsets = {}
    for ln in range(frag.lanes):
        for i in range(frag.elements):
            r, c = _grid_pos(frag, frag.coords(ln, i))
            if c < max_cols:
                offsets[(ln, i)] = layouts.st_offset(r, c, rows=rows, cols=cols, itemsize=itemsize, swizzle=swizzle)
    lines = (max(offsets.values()) // 128) + 1
    cell_w = 20 if per_word == 2 else 18
    left, top = 34, y0 + 34
    body.append(_text(left, top - 20, f"as st<{'bf16' if itemsize == 2 else 'float'}, {rows}, {cols}> in shared "
                      f"memory, swizzle {swizzle}: 128-byte lines x 32 banks", anchor="start", size=11))
    for b in range(0, 32, 4):
        body.append(_text(left + b * cell_w + cell_w / 2, top - 4, f"b{b}", size=8, fill="#666"))
    for ln_i, off in sorted(offsets.items(), key=lambda kv: kv[1]):
        ln, i = ln_i
        line, byte = divmod(off, 128)
        bank, sub = divmod(byte, 4)
        x = left + bank * cell_w + (sub // itemsize) * (cell_w / per_word)
        y = top + line * 14
        faded = lane is not None and ln != lane
        stroke = ' stroke="#000" stroke-width="1.5"' if lane is not None and ln == lane else ' stroke="#fff"'
        tip = "" if dense else f"<title>lane {ln} element {i}: byte {off}, bank {bank}</title>"
        body.append(f'<rect class="smem" data-lane="{ln}" data-i="{i}" data-byte="{off}" data-bank="{bank}" '
                    f'x="{x:g}" y="{y}" width="{cell_w / per_word:g}" height="14" '
                    f'fill="{lane_color(ln, faded=faded)}"{stroke}>{tip}</rect>')
    for line in range(lines):
        body.append(_text(left - 4, top + line * 14 + 10, str(line), anchor="end", size=8, fill="#666"))
    height = top + lines * 14 + 12
    return body, height, max(width, left + 32 * cell_w + 16)
