"""Run one emulated launch in trace mode and return the runtime's raw trace (a dict), nothing else.

This is the only part of ``tklab.trace`` that runs learner code, so ``tklab.trace`` calls it inside the
sandboxed child for an exercise; the parent gets the raw dict as JSON and analyses it (:mod:`.analyze`).

Public API: ``Options`` (sampling and the logical clock's constants), ``collect(kernel, grid, block, args, ...)``.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Options:
    """What to record. ``blocks``: blocks whose accesses are recorded (0: all; the first ones in launch order);
    ``timeline_blocks``: blocks whose per-warp timeline is kept; ``tma_latency``: logical steps from a TMA
    load's issue to its completion; ``wgmma_cost``: steps per N column of one m64nNk16 wgmma."""

    blocks: int = 0
    timeline_blocks: int = 2
    max_events: int = 200_000
    tma_latency: int = 600
    wgmma_cost: int = 1

    def __post_init__(self) -> None:
        for name in ("blocks", "timeline_blocks", "max_events", "tma_latency", "wgmma_cost"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"trace option {name}={v!r}: give a whole number >= 0")


def _runtime(kernel: Any) -> ctypes.CDLL:
    rt = kernel.module._rt
    rt.tkemu_trace_config.argtypes = [ctypes.c_int] * 6
    rt.tkemu_trace_config.restype = None
    rt.tkemu_trace.restype = ctypes.c_char_p
    return rt


def collect(kernel: Any, grid: Any, block: Any, args: Sequence[Any], *, shared_mem: int = 0,
            options: Options = Options(), **launch: Any) -> dict[str, Any]:
    """Launch ``kernel`` (a ``tklab.emulate`` kernel) once with tracing on (one worker: blocks in order) and
    return the raw trace: ``instrs`` (pc, shared, op, width, patterns), ``ops``, ``events``, ``blocks_traced``."""
    rt = _runtime(kernel)
    rt.tkemu_trace_config(1, options.blocks, options.timeline_blocks, options.max_events, options.tma_latency,
                          options.wgmma_cost)
    try:
        kernel(grid, block, args, shared_mem=shared_mem, workers=1, **launch)
    finally:
        rt.tkemu_trace_config(0, 0, 0, 0, 0, 0)
    raw = json.loads((rt.tkemu_trace() or b"{}").decode(errors="replace") or "{}")
    if not raw:
        raise RuntimeError(f"{kernel.name}: the emulator returned no trace (an emulator runtime without trace mode?)")
    return raw
