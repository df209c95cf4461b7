"""Interactive explorers for shared-memory banks, fragment layouts and TMA pipelines, and the SVG drawings
behind them.

Public API::

    bank_explorer(*, fn=None, trace=None, **controls) -> BankExplorer  # ipywidgets; .access, .offsets, .error
    layout_explorer(name, operand, *, lane=-1, swizzle=None) -> LayoutExplorer
    bank_svg(access, *, title=None) -> str                      # tklab.models.banks.Access → SVG
    layout_svg(fragment, *, lane=None, swizzle=None, max_cols=64) -> str
    bank_pattern(pattern, *, width, stride, group, cols, padding, swizzle, column, expression, fn) -> offsets
    ncu_numbers(access) -> {metric: value}                      # what Nsight Compute would report
    pipeline_explorer(stages, latency, consume, transfer, issue, *, measured=None, trace=None) -> PipelineExplorer
    timeline_svg(simulate(stages, latency, consume, ...)) -> str    # a TMA ring over time (pipeline.py)
    picture(svg, text) -> Picture                               # a drawing as a notebook output (PNG)
    traced.view(trace, chapter) -> [svg, ...]                   # a learner's trace beside the model (traced.py)
    traced.yours(exercise)                                      # the notebooks' "your kernel, traced" cell

``trace=`` (a ``tklab.trace(...)`` result or its JSON) puts the learner's own kernel into an explorer: its
shared-memory instructions into the bank explorer, its warps above the ring model, its warpgroups' wgmma
groups above the schedules (``attention_view.schedule_explorer(trace=...)``).

The drawing functions need no widget state: ``picture(bank_svg(banks.analyze(offs, 16)))`` shows one as a PNG,
which JupyterLab draws even in a notebook nobody has trusted yet (SVG it does not).
"""

from .draw import bank_svg, lane_color, layout_svg, ncu_numbers
from .patterns import PATTERNS, bank_pattern, expression_offsets
from .pipeline import pipeline_explorer, simulate, sweep_svg, timeline_svg
from .raster import Picture, svg_png


def picture(svg: str, text: str = "a drawing") -> Picture:
    """Show one of the drawings as a PNG notebook output (what ``IPython.display.SVG`` would, but trusted or not)."""
    return Picture(svg, text)


__all__ = ["PATTERNS", "BankExplorer", "LayoutExplorer", "Picture", "bank_explorer", "bank_pattern", "bank_svg",
           "expression_offsets", "lane_color", "layout_explorer", "layout_svg", "ncu_numbers", "picture",
           "pipeline_explorer", "simulate", "sweep_svg", "timeline_svg", "svg_png"]


def __getattr__(name: str):  # the explorers import ipywidgets only when asked for
    if name in ("BankExplorer", "LayoutExplorer", "bank_explorer", "layout_explorer"):
        from . import explorers

        return getattr(explorers, name)
    raise AttributeError(f"module 'tklab.widgets' has no attribute {name!r}")
