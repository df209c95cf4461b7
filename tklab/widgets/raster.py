"""Our SVG drawings as PNG images, for places that will not show SVG.

JupyterLab shows SVG, and HTML with SVG inside, only in notebooks the reader has trusted; a freshly
cloned notebook is not trusted, so a stored explorer figure appeared as a page of tooltip text. PNG is
shown everywhere. The drawings in ``draw.py`` use a small SVG vocabulary (``rect``, ``text``, ``line``,
``polyline``, ``circle``; colours
as ``#rgb``/``#rrggbb``/``hsl()``), so this module draws exactly those elements with matplotlib instead of
depending on a system SVG library: the SVG stays the one source of every picture.

Public API: ``svg_png(svg, *, scale=2.0) -> bytes``, ``compact_png(png) -> bytes``,
``stacked_png(svgs, *, scale=2.0) -> (bytes, (width, height))``, ``svg_size(svg) -> (width, height)``,
``Picture(svg, text)`` (shows as a PNG in a notebook), ``svg_color(value) -> (r, g, b) | None``.
"""

from __future__ import annotations

import colorsys
import io
import re
import xml.etree.ElementTree as ET

_NS = "{http://www.w3.org/2000/svg}"
_PX_PER_INCH = 100  # lay the figure out at 100 px per inch, then render at ``scale`` times that
_HSL = re.compile(r"hsl\(\s*([\d.]+)\s*,\s*([\d.]+)%\s*,\s*([\d.]+)%\s*\)")


def svg_color(value: str | None) -> tuple[float, float, float] | None:
    """An SVG colour as an RGB triple in 0..1; None for ``none``/absent. Raises ValueError for others."""
    if value is None or value == "none":
        return None
    v = value.strip()
    if m := _HSL.fullmatch(v):
        h, s, light = (float(x) for x in m.groups())
        return colorsys.hls_to_rgb(h / 360, light / 100, s / 100)
    if re.fullmatch(r"#[0-9a-fA-F]{3}", v):
        return tuple(int(c * 2, 16) / 255 for c in v[1:])  # type: ignore[return-value]
    if re.fullmatch(r"#[0-9a-fA-F]{6}", v):
        return tuple(int(v[i:i + 2], 16) / 255 for i in (1, 3, 5))  # type: ignore[return-value]
    named = {"black": (0.0, 0.0, 0.0), "white": (1.0, 1.0, 1.0), "red": (1.0, 0.0, 0.0)}
    if v in named:
        return named[v]
    raise ValueError(f"svg_png: unsupported colour {value!r}")


def _font_px(el: ET.Element, inherited: float) -> float:
    size = el.get("font-size")
    if size is None:
        m = re.search(r"font-size:\s*([\d.]+)px", el.get("style", ""))
        return float(m.group(1)) if m else inherited
    return float(size.removesuffix("px"))


def svg_png(svg: str, *, scale: float = 2.0) -> bytes:
    """Render one of our SVG drawings to PNG bytes, ``scale`` image pixels per screen pixel of the SVG.

    Only ``rect``, ``text``, ``line``, ``polyline`` and ``circle`` are drawn (``title`` tooltips have no
    place in a picture); any other element raises ValueError, so a drawing that outgrows this vocabulary
    fails loudly in the tests.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    root = ET.fromstring(svg)
    if root.tag != f"{_NS}svg":
        raise ValueError("svg_png: not an <svg> document")
    width, height = float(root.get("width", 0)), float(root.get("height", 0))
    if width <= 0 or height <= 0:
        raise ValueError("svg_png: the <svg> needs a positive width and height")
    box = [float(v) for v in root.get("viewBox", f"0 0 {width} {height}").split()]
    zoom = width / box[2]  # screen pixels per drawing unit
    base_font = _font_px(root, 10.0)
    fig = Figure(figsize=(width / _PX_PER_INCH, height / _PX_PER_INCH), dpi=_PX_PER_INCH * scale)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(box[0], box[0] + box[2])
    ax.set_ylim(box[1] + box[3], box[1])
    ax.axis("off")
    pt = 72 / _PX_PER_INCH * zoom  # points per drawing unit
    for el in root:
        tag = el.tag.removeprefix(_NS)
        if tag == "rect":
            stroke = svg_color(el.get("stroke"))
            ax.add_patch(Rectangle((float(el.get("x", 0)), float(el.get("y", 0))), float(el.get("width", 0)),
                                   float(el.get("height", 0)), facecolor=svg_color(el.get("fill", "#000")) or "none",
                                   edgecolor=stroke or "none",
                                   linewidth=float(el.get("stroke-width", 1)) * pt if stroke else 0))
        elif tag == "text":
            anchor = {"middle": "center", "end": "right"}.get(el.get("text-anchor", "start"), "left")
            ax.text(float(el.get("x", 0)), float(el.get("y", 0)), "".join(el.itertext()), ha=anchor, va="baseline",
                    fontsize=_font_px(el, base_font) * pt, fontfamily="monospace",
                    fontweight=el.get("font-weight", "normal"), color=svg_color(el.get("fill", "#222")))
        elif tag in ("line", "polyline"):
            if tag == "line":
                xs = [float(el.get("x1", 0)), float(el.get("x2", 0))]
                ys = [float(el.get("y1", 0)), float(el.get("y2", 0))]
            else:
                pts = [float(v) for v in el.get("points", "").replace(",", " ").split()]
                xs, ys = pts[0::2], pts[1::2]
            color = svg_color(el.get("stroke", "#000"))
            if color is not None:
                ax.plot(xs, ys, color=color, linewidth=float(el.get("stroke-width", 1)) * pt,
                        linestyle="--" if el.get("stroke-dasharray") else "-")
        elif tag == "circle":
            from matplotlib.patches import Circle

            ax.add_patch(Circle((float(el.get("cx", 0)), float(el.get("cy", 0))), float(el.get("r", 0)),
                                facecolor=svg_color(el.get("fill", "#000")) or "none",
                                edgecolor=svg_color(el.get("stroke")) or "none"))
        elif tag == "title":
            continue
        else:
            raise ValueError(f"svg_png: cannot draw <{tag}> (only rect, text, line, polyline, circle)")
    out = io.BytesIO()
    import matplotlib as mpl

    # The picture is the SVG's own box: a notebook's tklab.plots() sets savefig.bbox = "tight", which would
    # crop and rescale it (and shift every cell's colour off its centre).
    with mpl.rc_context({"savefig.bbox": "standard"}):
        fig.savefig(out, format="png", dpi=_PX_PER_INCH * scale, metadata={"Software": None})
    return compact_png(out.getvalue())


def compact_png(png: bytes, colors: int = 256) -> bytes:
    """The same picture with a palette of ``colors`` colours: about a third of the bytes for our figures
    (flat colours, text), which matters because notebooks store them. Deterministic (median cut)."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        out = io.BytesIO()
        im.convert("RGB").quantize(colors, method=Image.Quantize.MEDIANCUT).save(out, format="PNG", optimize=True)
    return out.getvalue()


def stacked_png(svgs: list[str], *, scale: float = 2.0, gap: float = 8.0) -> tuple[bytes, tuple[float, float]]:
    """Several drawings one below the other, left-aligned, as one PNG (an explorer whose figure is more than
    one drawing); returns the PNG and its size on screen in CSS pixels (``gap`` between drawings)."""
    from PIL import Image

    if not svgs:
        raise ValueError("stacked_png: no drawings")
    if len(svgs) == 1:
        return svg_png(svgs[0], scale=scale), svg_size(svgs[0])
    sizes = [svg_size(svg) for svg in svgs]
    width = max(w for w, _ in sizes)
    height = sum(h for _, h in sizes) + gap * (len(svgs) - 1)
    canvas = Image.new("RGB", (round(width * scale), round(height * scale)), "white")
    y = 0.0
    for svg, (_, h) in zip(svgs, sizes, strict=True):
        with Image.open(io.BytesIO(svg_png(svg, scale=scale))) as im:
            canvas.paste(im.convert("RGB"), (0, round(y * scale)))
        y += h + gap
    out = io.BytesIO()
    canvas.save(out, format="PNG")
    return compact_png(out.getvalue()), (width, height)


def svg_size(svg: str) -> tuple[float, float]:
    """The drawing's size on screen, in CSS pixels (its ``width`` and ``height``)."""
    root = ET.fromstring(svg)
    return float(root.get("width", 0)), float(root.get("height", 0))


class Picture:
    """One of our drawings as a notebook output: a PNG (shown in any notebook, trusted or not) at the
    drawing's own size, twice as many pixels for sharp text, and a line of text for plain-text readers."""

    def __init__(self, svg: str, text: str = "a drawing", *, scale: float = 2.0):
        self.svg, self.text, self.scale = svg, text, scale

    def _repr_mimebundle_(self, **_kwargs: object) -> tuple[dict, dict]:
        import base64

        width, height = svg_size(self.svg)
        data = {"image/png": base64.b64encode(svg_png(self.svg, scale=self.scale)).decode("ascii"),
                "text/plain": f"<{self.text}: {width:.0f}x{height:.0f} picture>"}
        return data, {"image/png": {"width": round(width), "height": round(height)}}

    def __repr__(self) -> str:
        return f"Picture({self.text!r})"
