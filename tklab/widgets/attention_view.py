"""``tklab.widgets.attention_view``: the attention chapters' pictures and explorers under the one name the
notebooks use.

The drawings live in ``attention_draw.py`` (no widgets), the sliders in ``attention_explorer.py`` (ipywidgets,
imported only when an explorer is asked for). This module names both, and neither imports it back.

Public API: ``block_map_svg``, ``timeline_svg``, ``block_stats``, ``block_choices``, ``COLORS``, ``NAMES``,
``SPAN_COLORS`` (see ``attention_draw.py``), ``blocks_explorer(**initial)``, ``schedule_explorer(**initial)``.
"""

from __future__ import annotations

from typing import Any

from .attention_draw import COLORS, NAMES, SPAN_COLORS, block_choices, block_map_svg, block_stats, timeline_svg

__all__ = ["COLORS", "NAMES", "SPAN_COLORS", "block_choices", "block_map_svg", "block_stats", "blocks_explorer",
           "schedule_explorer", "timeline_svg"]


def blocks_explorer(**initial: Any) -> Any:
    """Sliders for the sequence length and block shape, and a causal switch, redrawing block_map_svg."""
    from .attention_explorer import BlocksExplorer  # ipywidgets only when asked for

    return BlocksExplorer(**initial)


def schedule_explorer(**initial: Any) -> Any:
    """Sliders for the softmax/product time ratio, the stagger and the latency; the three schedules (and, with
    ``trace=``, a traced kernel's own warpgroup schedule above them)."""
    from .attention_explorer import ScheduleExplorer

    return ScheduleExplorer(**initial)
