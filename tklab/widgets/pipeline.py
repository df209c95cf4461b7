"""``tklab.widgets.pipeline``: chapter 07's ring of stages under the one name the notebooks use.

The model and its drawings live in ``ring.py`` (no widgets), the sliders in ``ring_explorer.py`` (ipywidgets,
imported only when an explorer is asked for). This module names both, and neither imports it back, so the
three form no circle and ``tklab.widgets.pipeline_explorer`` is only ever the function.

Public API: ``simulate``, ``steady_period``, ``phase_table``, ``sweep``, ``timeline_svg``, ``sweep_svg``,
``Tile``, ``Timeline``, ``COLORS`` (see ``ring.py``) and ``pipeline_explorer(...)``.
"""

from __future__ import annotations

from .ring import COLORS, Tile, Timeline, phase_table, simulate, steady_period, sweep, sweep_svg, timeline_svg

__all__ = ["COLORS", "Tile", "Timeline", "phase_table", "pipeline_explorer", "simulate", "steady_period", "sweep",
           "sweep_svg", "timeline_svg"]


def pipeline_explorer(stages: int = 2, latency: float = 1.5, consume: float = 0.3, transfer: float = 1.0,
                      issue: float = 0.05, *, tiles: int = 12, measured: dict[int, float] | None = None,
                      ceiling: float | None = None, stage_bytes: int = 16384, trace: object = None) -> object:
    """Sliders for the model's parameters; the timeline and the stage sweep (beside ``measured``) redraw.
    ``trace`` (a ``tklab.trace`` of a ring, or its JSON) draws that kernel's warps above the model, which opens
    on the trace's stage count."""
    from .ring_explorer import PipelineExplorer  # ipywidgets only when asked for

    return PipelineExplorer(stages, latency, consume, transfer, issue, tiles=tiles, measured=measured,
                            ceiling=ceiling, stage_bytes=stage_bytes, trace=trace)
