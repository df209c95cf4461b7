"""``tklab.trace(...)``: the learner's own kernel as the CPU emulator saw it (no GPU needed).

Two ways in:

- an exercise id (``"ch04_swizzle"``): the learner's file in ``exercises/`` runs in the sandboxed child
  (mode "trace": the exercise's first emulated case, traced); only the trace comes back, as JSON, and is
  analysed here. Learner code never runs in this process.
- CUDA source text (or a path to a ``.cu`` file) with ``kernel``, ``grid``, ``block`` and ``args`` (NumPy arrays,
  scalars, ``tklab.emulate.tensor_map``s): compiled for the emulator and traced in this process, like
  ``tklab.emulate.compile(...)`` would run it (it is your code, on your machine).

Public API: ``trace(exercise_or_source, ...) -> Trace``, ``TraceUnavailable``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .analyze import analyze
from .collect import Options, collect
from .model import Trace


class TraceUnavailable(RuntimeError):
    """The trace could not be taken here (no C++ compiler, the exercise failed to build or run, ...)."""


def _is_exercise(x: str) -> bool:
    from ..grading import specs

    return "\n" not in x and len(x) < 100 and x in specs.all_ids()


def trace(exercise_or_source: str | Path, *, kernel: str | None = None, grid: Any = None, block: Any = None,
          args: Sequence[Any] = (), shared_mem: int = 0, options: Sequence[str] = (), name: str | None = None,
          arch: str | None = None, path: str | Path | None = None, blocks: int = 0, timeline_blocks: int = 2,
          tma_latency: int = 600, wgmma_cost: int = 1, tma_order: str = "delayed", timeout: float = 120.0) -> Trace:
    """Trace one launch: per shared/global instruction its wavefronts or sectors, per warp its waits, per loop its
    instruction mix (see ``tklab.trace.model``). ``blocks``: record only the first N blocks (0: all)."""
    opts = Options(blocks=blocks, timeline_blocks=timeline_blocks, tma_latency=tma_latency, wgmma_cost=wgmma_cost)
    if isinstance(exercise_or_source, str) and _is_exercise(exercise_or_source):
        return _trace_exercise(exercise_or_source, path=path, opts=opts, timeout=timeout)
    src = exercise_or_source
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


def _trace_exercise(exercise_id: str, *, path: str | Path | None, opts: Options, timeout: float) -> Trace:
    from ..grading import runner, specs
    from . import exercise as traced

    spec = specs.get(exercise_id)
    file = Path(path) if path is not None else traced.learner_file(spec)
    if not file.is_file():
        raise FileNotFoundError(f"tklab.trace: no file {file} for exercise {exercise_id}")
    source = file.read_text(encoding="utf-8")
    env = {traced.ENV: json.dumps(opts.__dict__)}
    from ..emulate import exercise as emulated

    out = runner.run_isolated(exercise_id, file, mode="trace", timeout=timeout, source=source, env=env,
                              ptx=emulated.ptx_for(spec, source, file.name))
    raw = (out.result or {}).get("trace")
    if not isinstance(raw, bytes):
        why = out.message or out.status
        raise TraceUnavailable(f"tklab.trace({exercise_id!r}): no trace came back from the run ({why})")
    return traced.parse(raw, spec, source, file.name)
