"""Trace one launch of CUDA source on the CPU emulator (no GPU needed): compiled and traced in this process, like
``tklab.emulate.compile(...)`` would run it (it is your code, on your machine).

``tklab.trace`` also takes an exercise id; that way runs the learner's file in the sandboxed child and is the
grader's (``tklab.grading.traced``): learner code never runs in this process.

Public API: ``trace(source, ...) -> Trace``, ``TraceUnavailable``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .analyze import analyze
from .collect import Options, collect
from .model import Trace


class TraceUnavailable(RuntimeError):
    """The trace could not be taken here (no C++ compiler, the exercise failed to build or run, ...)."""


def trace(source: str | Path, *, kernel: str | None = None, grid: Any = None, block: Any = None,
          args: Sequence[Any] = (), shared_mem: int = 0, options: Sequence[str] = (), name: str | None = None,
          arch: str | None = None, blocks: int = 0, timeline_blocks: int = 2, tma_latency: int = 600,
          wgmma_cost: int = 1, tma_order: str = "delayed") -> Trace:
    """Trace one launch: per shared/global instruction its wavefronts or sectors, per warp its waits, per loop its
    instruction mix (see ``tklab.trace.model``). ``blocks``: record only the first N blocks (0: all)."""
    opts = Options(blocks=blocks, timeline_blocks=timeline_blocks, tma_latency=tma_latency, wgmma_cost=wgmma_cost)
    src = source
    if isinstance(src, Path) or (isinstance(src, str) and "\n" not in src and src.endswith((".cu", ".cuh"))):
        p = Path(src)
        if not p.is_file():
            raise FileNotFoundError(f"tklab.trace: no file {p} (give an exercise id, a .cu path or CUDA source)")
        src, name = p.read_text(), name or p.name
    if not isinstance(src, str) or "__global__" not in src:
        raise ValueError("tklab.trace: give an exercise id (e.g. 'ch04_swizzle'), a .cu file or CUDA source with "
                         "a __global__ kernel")
    if kernel is None or grid is None or block is None:
        raise ValueError("tklab.trace on source needs kernel=, grid=, block= and args= (the launch to trace)")
    from .. import emulate
    from ..toolchain.compiler import COURSE_ARCH

    name = name or "kernel.cu"
    mod = emulate.compile(src, arch=arch or COURSE_ARCH, name=name, options=options)
    k = mod[kernel]
    raw = collect(k, grid, block, args, shared_mem=shared_mem, options=opts, tma_order=tma_order)
    from ..run.launch import check_launch

    g, b = check_launch(kernel, grid, block, args)
    from .analyze import resolve

    return analyze(raw, kernel=kernel, source=src, source_name=name, grid=g, block=b, where=resolve(raw, mod, name))
