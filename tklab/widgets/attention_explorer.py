"""The attention chapters' explorers (ipywidgets 8): the block map of chapter 09 and the schedules of chapter
10. Drawing is in attention_view.py; like the other explorers they carry a PNG copy of their figure, so a
notebook opened cold shows the picture, not a widget's repr. Controls offer only values the models take,
and every slider names its unit.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as W

from ..models import schedules
from .attention_draw import block_choices, block_map_svg, timeline_svg
from .explorers import _StaticFallback


class BlocksExplorer(_StaticFallback, W.VBox):
    """Sequence length, block shape and the causal switch, redrawing ``block_map_svg``."""

    def __init__(self, seq: int = 1000, block_rows: int = 128, block_keys: int = 64, causal: bool = True):
        self.seq = W.IntSlider(value=seq, min=16, max=8192, step=1, description="seq (tokens)",  # any length
                               style={"description_width": "initial"}, layout=W.Layout(width="520px"))
        rows, keys = block_choices()  # small shapes and every shipped kernel's own
        self.block_rows = W.Dropdown(options=rows, value=block_rows, description="query rows")
        self.block_keys = W.Dropdown(options=keys, value=block_keys, description="keys")
        self.causal = W.Checkbox(value=causal, description="causal")
        self.figure, self.status = W.HTML(), W.HTML()
        for w in (self.seq, self.block_rows, self.block_keys, self.causal):
            w.observe(lambda _ch: self.update(), names="value")
        super().__init__([W.HBox([self.seq, self.causal]), W.HBox([self.block_rows, self.block_keys]), self.figure])
        self.update()

    def state(self) -> dict[str, Any]:
        return {k: getattr(self, k).value for k in ("seq", "block_rows", "block_keys", "causal")}

    def update(self) -> None:
        s = self.state()
        self.figure.value = block_map_svg(s["seq"], s["block_rows"], s["block_keys"], s["causal"])

    def __repr__(self) -> str:
        return f"BlocksExplorer({self.state()})"


class ScheduleExplorer(_StaticFallback, W.VBox):
    """The softmax's time relative to a product, the stagger and the latency (all in units of one product's
    time); the three schedules of ``tklab.models.schedules`` on one time scale."""

    def __init__(self, softmax: float = 1.0, stagger: float = 0.0, latency: float = 0.25, trace: Any = None):
        from . import traced

        self.trace = traced.load(trace) if trace is not None else None
        self.traced_svg = traced.schedule_svg(self.trace) if self.trace is not None else ""  # above the models
        # the descriptions name the unit, so they are long: a fixed width for them leaves the tracks room
        style, lay = {"description_width": "210px"}, W.Layout(width="600px")
        self.softmax = W.FloatSlider(value=softmax, min=0.25, max=3.0, step=0.25, style=style, layout=lay,
                                     description="softmax (× a product's time)")
        self.stagger = W.FloatSlider(value=stagger, min=0.0, max=2.0, step=0.25, style=style, layout=lay,
                                     description="stagger (× a product's time)")
        self.latency = W.FloatSlider(value=latency, min=0.0, max=1.0, step=0.125, style=style, layout=lay,
                                     description="latency (× a product's time)")
        self.figure, self.status = W.HTML(), W.HTML()
        for w in (self.softmax, self.stagger, self.latency):
            w.observe(lambda _ch: self.update(), names="value")
        super().__init__([W.VBox([self.softmax, self.stagger, self.latency]), self.figure])
        self.update()

    def state(self) -> dict[str, float]:
        return {k: getattr(self, k).value for k in ("softmax", "stagger", "latency")}

    def update(self) -> None:
        s = self.state()
        tls = [schedules.simulate(name, blocks=5, **s) for name in schedules.SCHEDULES]
        scale = 600 / max(t.end for t in tls)
        self.figure.value = self.traced_svg + "".join(timeline_svg(t, scale=scale) for t in tls)

    def __repr__(self) -> str:
        return f"ScheduleExplorer({self.state()})"
