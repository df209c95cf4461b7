"""The two interactive explorers (ipywidgets 8). All the work is in draw.py and patterns.py; these only
wire controls to them, so every state a learner can reach is also reachable (and tested) in plain Python.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html import escape
from typing import Any

import ipywidgets as W

from ..models import banks, layouts
from .draw import _grid_shape, bank_svg, layout_svg, ncu_numbers
from .patterns import PATTERNS, bank_pattern

INSTRUCTIONS = ("per-lane access", "ldmatrix/stmatrix .x1", "ldmatrix/stmatrix .x2", "ldmatrix/stmatrix .x4")


def _error_html(msg: str) -> str:
    return f'<div style="color:#b00020;font-weight:bold">{escape(msg)}</div>'


#: Pixels per SVG pixel of the PNG copy stored with an explorer's output.
STATIC_SCALE = 1.5
#: Largest figure copied as HTML into a notebook's stored output, for figures that cannot be a PNG.
STATIC_FIGURE_LIMIT = 160_000


class _StaticFallback:
    """A live explorer is a widget view, which JupyterLab draws only while the kernel that made it runs
    and only in a trusted notebook; a fresh clone is neither. Adding the current figure as a PNG image
    (which JupyterLab shows in any notebook, trusted or not) lets a notebook opened cold, an HTML export
    or GitHub show the picture; a running explorer still takes precedence.

    A figure of several drawings (the pipeline explorer: a timeline and a sweep) becomes one PNG, the
    drawings one below the other. Figures the rasteriser cannot draw (elements beyond its vocabulary) keep
    the older copy as ``text/html``, which exports show but an untrusted JupyterLab notebook shows only as
    text.
    """

    status: W.HTML
    figure: W.HTML

    def _repr_mimebundle_(self, **kwargs: Any) -> dict | tuple[dict, dict] | None:
        import base64
        import xml.etree.ElementTree as ET

        from .raster import stacked_png

        bundle = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        if bundle is None:
            return bundle
        figure = self.figure.value
        drawings = re.findall(r"<svg\b.*?</svg>", figure, flags=re.S)
        if drawings and "".join(drawings) == figure:
            try:
                png, (width, height) = stacked_png(drawings, scale=STATIC_SCALE)
            except (ValueError, ET.ParseError):
                png = None
            if png is not None:
                bundle["image/png"] = base64.b64encode(png).decode("ascii")
                return bundle, {"image/png": {"width": round(width), "height": round(height)}}
        if len(figure) > STATIC_FIGURE_LIMIT:
            figure = "<p><i>(figure too large for a static copy: run the notebook to see it)</i></p>"
        bundle["text/html"] = self.status.value + figure
        return bundle


class BankExplorer(_StaticFallback, W.VBox):
    """Pick a pattern; see 32 banks x wavefronts coloured by lane, and what ncu would count."""

    TRACED = "your kernel (traced)"

    def __init__(self, *, fn: Callable[[int], int | None] | None = None, trace: Any = None,
                 matrix: bool = True, **initial: Any):
        from . import traced

        self.fn = fn
        self.matrix = matrix  # offer ldmatrix/stmatrix (False before a chapter has taught them)
        self.trace = traced.load(trace) if trace is not None else None
        self._traced = traced.worst_shared(self.trace) if self.trace is not None else []
        style = {"description_width": "130px"}
        def lay() -> W.Layout:  # two columns of these fit a notebook's column beside the file browser
            return W.Layout(width="400px")

        options = [p for p in PATTERNS if p != "function" or fn is not None] + ([self.TRACED] if self._traced else [])
        self.pattern = W.Dropdown(options=options, value=self.TRACED if self._traced else
                                  "function" if fn is not None else "stride", description="pattern",
                                  style=style, layout=lay())
        self.traced = W.Dropdown(options=[(f"{traced.where(t.line, t.text, 40)} ({t.ptx})", i)
                                          for i, t in enumerate(self._traced)] or [("(no trace)", -1)],
                                 description="instruction", style=style, layout=W.Layout(width="700px"))
        self.instruction = W.Dropdown(options=INSTRUCTIONS if matrix else INSTRUCTIONS[:1], value=INSTRUCTIONS[0],
                                      description="instruction",
                                      style=style, layout=lay())
        self.width = W.Dropdown(options=list(banks.WIDTHS), value=4, description="bytes per lane", style=style,
                                layout=lay())
        self.store = W.Checkbox(value=False, description="store (else load)", style=style, layout=W.Layout())
        self.stride = W.IntSlider(value=1, min=0, max=64, description="stride (elements)", style=style, layout=lay())
        self.group = W.IntSlider(value=1, min=1, max=32, description="lanes / element", style=style, layout=lay())
        self.cols = W.Dropdown(options=[16, 32, 64, 128], value=64, description="tile cols (bf16)", style=style,
                               layout=lay())
        self.padding = W.IntSlider(value=0, min=0, max=64, step=4, description="row padding (B)", style=style,
                                   layout=lay())  # steps of the access width: every position is a valid layout
        self.column = W.IntSlider(value=0, min=0, max=63, description="column (pieces)", style=style, layout=lay())
        self.swizzle = W.Dropdown(options=list(layouts.SWIZZLE_MODES), value="none", description="swizzle",
                                  style=style, layout=lay())
        self.expression = W.Text(value="4 * (lane * 33 % 64)", description="offset(lane) =", style=style,
                                 layout=W.Layout(width="400px"), continuous_update=False)
        self.figure = W.HTML()
        self.status = W.HTML()
        self.access: banks.Access | None = None
        self.offsets: list[int | None] = []
        self.error: str | None = None
        controls = [self.pattern, self.instruction, self.width, self.store, self.stride, self.group, self.cols,
                    self.padding, self.column, self.swizzle, self.expression] + ([self.traced] if self._traced else [])
        for name, value in initial.items():
            if not hasattr(self, name) or not isinstance(getattr(self, name), W.ValueWidget):
                raise ValueError(f"bank_explorer has no control {name!r}")
            getattr(self, name).value = value
        for c in controls:
            c.observe(self._changed, names="value")
        self.controls = controls
        self._fit_padding()
        super().__init__([W.HBox([W.VBox(controls[:5]), W.VBox(controls[5:11])]), *controls[11:], self.status,
                          self.figure])
        self.update()

    #: The controls each pattern reads (the others are hidden: moving them would change nothing).
    USES = {
        "stride": ("width", "stride"),
        "broadcast": ("width", "stride", "group"),
        "tile row walk": ("width", "cols", "padding"),
        "tile column walk": ("width", "cols", "padding", "column"),
        "expression": ("width", "expression"),
        "function": ("width",),
        TRACED: ("traced",),  # the trace fixes the instruction, its width and each lane's address
    }
    ALWAYS = ("pattern", "instruction", "store", "swizzle")

    def visible(self) -> list[str]:
        """Names of the controls shown for the current pattern and instruction."""
        if self.pattern.value == self.TRACED:
            return ["pattern", "traced"]
        uses = set(self.USES[self.pattern.value]) | set(self.ALWAYS)
        if not self.matrix:
            uses.discard("instruction")  # per-lane accesses only: nothing to choose
        if self.instruction.value != INSTRUCTIONS[0]:
            uses.discard("width")  # ldmatrix/stmatrix rows are 16 bytes, whatever the control says
        return [k for k in self.state() if k in uses]

    def _changed(self, _change: dict) -> None:
        self._fit_padding()
        self.update()

    def _fit_padding(self) -> None:
        """Keep the padding slider on multiples of the access width: a row padded by less would leave the
        wider accesses misaligned, which the model (like the hardware) refuses."""
        width = 16 if self.instruction.value != INSTRUCTIONS[0] else self.width.value
        if self.padding.step != width:
            self.padding.step = width
        if self.padding.value % width:
            self.padding.value -= self.padding.value % width  # observed: updates once more, aligned

    def state(self) -> dict[str, Any]:
        """The controls' values (what a notebook prints for this widget)."""
        names = ("pattern", "instruction", "width", "store", "stride", "group", "cols", "padding", "column",
                 "swizzle", "expression") + (("traced",) if self._traced else ())
        return {k: getattr(self, k).value for k in names}

    def update(self) -> None:
        """Recompute offsets → schedule → picture; a bad pattern shows its error instead of raising."""
        shown = set(self.visible())
        for name in self.state():
            getattr(self, name).layout.display = None if name in shown else "none"
        s = self.state()
        if s["pattern"] == self.TRACED:
            self._show_traced(self._traced[s["traced"]])
            return
        matrix = s["instruction"] != INSTRUCTIONS[0]
        try:
            self.offsets = bank_pattern(
                s["pattern"], width=16 if matrix else s["width"], stride=s["stride"], group=s["group"],
                cols=s["cols"], padding=s["padding"], swizzle=s["swizzle"], column=s["column"],
                expression=s["expression"], fn=self.fn)
            if matrix:
                num = int(s["instruction"][-1])
                self.access = banks.analyze_matrix(self.offsets[: 8 * num], num, store=s["store"])
            else:
                self.access = banks.analyze(self.offsets, s["width"], store=s["store"])
            self.error = None
        except ValueError as e:
            self.access, self.error = None, str(e)
            self.status.value = _error_html(self.error)
            self.figure.value = ""
            return
        acc = self.access
        what = acc.op + (f".x{len(acc.phases)}" if matrix else f", {acc.width} B per lane")
        ncu = "<br>".join(f"<code>{k}</code> = {v}" for k, v in ncu_numbers(acc).items())
        self.status.value = (f"<b>{acc.wavefronts} wavefront{'s' if acc.wavefronts != 1 else ''}</b> ({what}); "
                             f"conflict-free would be {acc.ideal}.<details><summary>what Nsight Compute would "
                             f"report (chapter 04, section 7)</summary>{ncu}</details>")
        self.figure.value = bank_svg(acc)

    def _show_traced(self, instr: Any) -> None:
        """One instruction of the learner's trace: its worst recorded execution through the bank model."""
        from . import traced

        self.access = traced.shared_access(instr)
        self.offsets, self.error = list(self.access.offsets), None
        acc = self.access
        ncu = "<br>".join(f"<code>{k}</code> = {v}" for k, v in ncu_numbers(acc).items())
        self.status.value = (f"<b>{escape(traced.where(instr.line, instr.text, 70))}</b>: {instr.per_request:.3g} "
                             f"wavefronts per request over {instr.executions} executions (conflict-free: "
                             f"{instr.ideal / max(instr.executions, 1):.3g}); below, its worst execution: "
                             f"<b>{acc.wavefronts}</b>.<details><summary>what Nsight Compute would report for "
                             f"that one execution</summary>{ncu}</details>")
        self.figure.value = bank_svg(acc, title=f"{traced.where(instr.line, instr.text, 60)}: {instr.ptx}")

    def __repr__(self) -> str:
        got = f"{self.access.wavefronts} wavefronts" if self.access else f"error: {self.error}"
        return f"BankExplorer({self.state()}) -> {got}"


def _label(name: str, operand: str | None) -> str:
    return f"{name} {operand}" if operand else name


class LayoutExplorer(_StaticFallback, W.VBox):
    """Pick an instruction's fragment or a register tile; highlight a lane; see where a swizzle puts it."""

    SMEM_CHOICES = ("(no shared-memory panel)", "none", "32B", "64B", "128B", "interleave")

    def __init__(self, name: str = "mma.m16n8k16", operand: str | None = "A", *, lane: int = -1,
                 swizzle: str | None = None):
        style = {"description_width": "100px"}
        options = [(_label(n, o), (n, o)) for n, o in layouts.names()]
        if (name, operand) not in [v for _, v in options]:
            layouts.fragment(name, operand)  # raises a clear ValueError for unknown names
            options.append((_label(name, operand), (name, operand)))
        self.fragment = W.Dropdown(options=options, value=(name, operand), description="fragment", style=style,
                                   layout=W.Layout(width="330px"))
        self.lane = W.IntSlider(value=lane, min=-1, max=127, description="lane (-1: all)", style=style,
                                layout=W.Layout(width="560px"))  # a row of its own: 128 lanes need a long track
        self.swizzle = W.Dropdown(options=self.SMEM_CHOICES, value=swizzle or self.SMEM_CHOICES[0],
                                  description="smem swizzle", style=style, layout=W.Layout(width="330px"))
        self.figure = W.HTML()
        self.status = W.HTML()
        self.error: str | None = None
        self.fragment.observe(lambda _ch: self._fragment_changed(), names="value")
        for c in (self.lane, self.swizzle):
            c.observe(lambda _ch: self.update(), names="value")
        super().__init__([W.HBox([self.fragment, self.swizzle]), self.lane, self.status, self.figure])
        ok, why = self.swizzle_choices()
        if swizzle is not None and swizzle not in ok:
            raise ValueError(f"layout_explorer: no {swizzle} shared-memory panel for {_label(name, operand)}: "
                             f"{why.get(swizzle, 'unknown mode')}")
        self._fragment_changed()

    def swizzle_choices(self) -> tuple[list[str], dict[str, str]]:
        """The shared-memory panels that apply to this fragment's shape, and why each other one does not.

        A swizzled shared tile is cut into panels one swizzle span wide, so the mode must divide a row:
        a 64-byte row (ldmatrix.x4: 32 bf16) can be 64B- or 32B-swizzled, not 128B.
        """
        f = self.frag
        rows, cols = _grid_shape(f)
        itemsize = f.bits // 8
        ok, why = [self.SMEM_CHOICES[0]], {}
        for mode in self.SMEM_CHOICES[1:]:
            try:
                layouts.st_offset(rows - 1, cols - 1, rows=rows, cols=cols, itemsize=itemsize, swizzle=mode)
                ok.append(mode)
            except ValueError as e:
                why[mode] = str(e)
        return ok, why

    def _fragment_changed(self) -> None:
        ok, _ = self.swizzle_choices()
        keep = self.swizzle.value if self.swizzle.value in ok else self.SMEM_CHOICES[0]
        if tuple(self.swizzle.options) != tuple(ok):
            self.swizzle.options = ok  # resets the value: set it again below
        self.swizzle.value = keep
        self.update()

    @property
    def frag(self) -> layouts.Fragment:
        return layouts.fragment(*self.fragment.value)

    def state(self) -> dict[str, Any]:
        return {"fragment": _label(*self.fragment.value), "lane": self.lane.value, "swizzle": self.swizzle.value}

    def update(self) -> None:
        f = self.frag
        self.lane.max = f.lanes - 1
        lane = self.lane.value if self.lane.value >= 0 else None
        swz = None if self.swizzle.value == self.SMEM_CHOICES[0] else self.swizzle.value
        max_cols = 16 if f.lanes > 32 else 64  # warpgroup fragments: 64 rows; the pattern repeats every 8 columns
        try:
            self.figure.value = layout_svg(f, lane=lane, swizzle=swz, max_cols=max_cols)
            self.error = None
        except ValueError as e:
            self.error = str(e)
            self.figure.value = layout_svg(f, lane=lane, max_cols=max_cols)
        lines = []
        if lane is not None:
            regs = []
            for i in range(f.elements):
                r, half = f.register_of(i)
                where = ", ".join(f"{d} {v}" for d, v in zip(f.dims, f.coords(lane, i), strict=True))
                regs.append(f"{i}: r{r}{'.hi' if half else '.lo' if f.bits == 16 else ''} = ({where})")
            shown = regs if len(regs) <= 16 else regs[:16] + [f"... {len(regs) - 16} more"]
            lines.append(f"<b>lane {lane}</b> holds " + "; ".join(shown))
        if self.error:
            lines.append(_error_html(f"shared-memory panel: {self.error}"))
        _, why = self.swizzle_choices()
        if why:
            row = _grid_shape(f)[1] * f.bits // 8
            lines.append(f"<i>not offered for this {row}-byte row: {', '.join(why)} (a swizzled tile is cut into "
                         "panels one swizzle span wide, so the span must divide the row)</i>")
        self.status.value = "<br>".join(lines)

    def __repr__(self) -> str:
        return f"LayoutExplorer({self.state()})" + (f" error: {self.error}" if self.error else "")


def bank_explorer(*, fn: Callable[[int], int | None] | None = None, trace: Any = None, matrix: bool = True,
                  **initial: Any) -> BankExplorer:
    """The bank-conflict explorer. ``fn(lane) -> byte offset | None`` adds your own pattern; ``trace`` (a
    ``tklab.trace`` result or its JSON) adds your kernel's shared-memory instructions, worst first, and opens
    on the worst; ``matrix=False`` offers per-lane accesses only (no ldmatrix/stmatrix: for a chapter before
    they are taught); keyword arguments set controls (``width=16, pattern="tile column walk", swizzle="128B"``)."""
    return BankExplorer(fn=fn, trace=trace, matrix=matrix, **initial)


def layout_explorer(name: str = "mma.m16n8k16", operand: str | None = "A", *, lane: int = -1,
                    swizzle: str | None = None) -> LayoutExplorer:
    """The layout explorer, opened on ``fragment(name, operand)`` with ``lane`` highlighted."""
    return LayoutExplorer(name, operand, lane=lane, swizzle=swizzle)
