"""The pipeline-timeline explorer (ipywidgets 8): sliders for the ring model of ring.py; the timeline
and the stage sweep, beside measured numbers, redraw on every change. All drawing is in ring.py, so
every state reachable here is reachable (and tested) in plain Python.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as W

from .explorers import _StaticFallback
from .ring import simulate, sweep, sweep_svg, timeline_svg

SWEEP_STAGES = (1, 2, 3, 4, 6, 8)


class PipelineExplorer(_StaticFallback, W.VBox):
    """Stages, load latency, read time, transfer time (bandwidth share) and issue cost of a TMA ring."""

    def __init__(self, stages: int, latency: float, consume: float, transfer: float, issue: float, *,
                 tiles: int = 12, measured: dict[int, float] | None = None, ceiling: float | None = None,
                 stage_bytes: int = 16384, trace: Any = None):
        from . import traced

        self.trace = traced.load(trace) if trace is not None else None
        # the learner's own ring, drawn once above the model (which opens on the trace's stage count)
        self.traced_svg = traced.warps_svg(self.trace) if self.trace is not None else ""
        if self.trace is not None and traced.ring_stages(self.trace):
            stages = min(8, traced.ring_stages(self.trace))
        style = {"description_width": "150px"}
        lay = W.Layout(width="420px")

        def slider(value: float, lo: float, hi: float, what: str) -> W.FloatSlider:
            return W.FloatSlider(value=value, min=lo, max=hi, step=0.05, description=what, style=style, layout=lay,
                                 readout_format=".2f")

        self.stages = W.IntSlider(value=stages, min=1, max=8, description="stages", style=style, layout=lay)
        self.latency = slider(latency, 0.0, 4.0, "load latency L (µs)")
        self.consume = slider(consume, 0.0, 2.0, "read time C (µs)")
        self.transfer = slider(transfer, 0.0, 2.0, "transfer time T (µs)")
        self.issue = slider(issue, 0.0, 1.0, "issue time P (µs)")
        self.measured, self.ceiling, self.stage_bytes, self.tiles = measured, ceiling, stage_bytes, tiles
        self.figure, self.status = W.HTML(), W.HTML()
        self.error: str | None = None
        controls = [self.stages, self.latency, self.consume, self.transfer, self.issue]
        for c in controls:
            c.observe(lambda _ch: self.update(), names="value")
        super().__init__([W.VBox(controls), self.status, self.figure])
        self.update()

    def state(self) -> dict[str, Any]:
        return {k: getattr(self, k).value for k in ("stages", "latency", "consume", "transfer", "issue")}

    def update(self) -> None:
        """Re-simulate and redraw; parameters the model refuses show their error instead of raising."""
        s = self.state()
        try:
            tl = simulate(s["stages"], s["latency"], s["consume"], s["transfer"], s["issue"], tiles=self.tiles)
        except ValueError as e:
            self.error = str(e)
            self.status.value = f'<div style="color:#b00020;font-weight:bold">{e}</div>'
            self.figure.value = ""
            return
        self.error = None
        model = sweep(SWEEP_STAGES, s["latency"], s["consume"], s["transfer"], s["issue"], self.stage_bytes)
        gbps = model.get(s["stages"]) or sweep((s["stages"],), s["latency"], s["consume"], s["transfer"], s["issue"],
                                               self.stage_bytes)[s["stages"]]
        self.status.value = (f"<b>{s['stages']} stage{'s' if s['stages'] > 1 else ''}</b>: one tile every "
                             f"{tl.period:.3g} µs per SM ({tl.limiter}) = {gbps:.0f} GB/s over 132 SMs")
        self.figure.value = self.traced_svg + timeline_svg(tl) + sweep_svg(model, self.measured, ceiling=self.ceiling)

    def __repr__(self) -> str:
        return f"PipelineExplorer({self.state()})" + (f" error: {self.error}" if self.error else "")
