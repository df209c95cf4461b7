"""An exercise traced in the sandboxed child (the runner's mode "trace"), and what the parent does with it.

The child compiles the learner's file for the emulator, runs the exercise's first emulated case with tracing
on (its outputs still go back, so the run is also checked), resolves code addresses to lines itself (the module
lives only in the child's folder), analyses, and sends the ``Trace`` as one JSON "trace" frame. The parent
only parses that JSON (``parse``): data, never code.

Public API: ``ENV``, ``MAX_BYTES``, ``is_exercise(name)``, ``trace_exercise(id, ...)`` (what ``tklab.trace`` does
with an exercise id), ``learner_file(spec)``, ``launcher(spec, path, chan)`` (the child's), ``parse(payload, ...)``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..trace.collect import Options
from ..trace.model import Trace
from ..trace.run import TraceUnavailable
from . import emulated, program

ENV = "TKLAB_TRACE_OPTIONS"  # the parent's Options, as JSON, for the child
MAX_BYTES = 4 << 20  # a trace frame larger than this is refused by the parent


def learner_file(spec: Any) -> Path:
    from .exercises import EXERCISES

    return EXERCISES / spec.exercise_file


def launcher(spec: Any, path: Path, chan: Any) -> Callable[[dict[str, Any], dict[str, int]], None]:
    """In the sandboxed child only (mode "trace"): the launch that runs one case with the emulator's trace on and
    sends the ``Trace`` as one JSON "trace" frame (see the module docstring)."""
    from ..trace.analyze import analyze, resolve
    from ..trace.collect import collect

    chan.send("device", name=emulated.LABEL)
    source = path.read_text()
    mod = emulated.load(spec, path)  # the PTX the checking process built, interpreted (or the practice build)
    kernel = mod[spec.kernel]
    opts = Options(**{**json.loads(os.environ.get(ENV, "{}") or "{}"), "max_events": 20_000})

    def launch(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        shape = spec.launch(dims)
        raw = collect(kernel, shape.grid, shape.block, spec.args(arrays, dims), shared_mem=shape.shared_mem,
                      options=opts, time_limit=emulated.TIME_LIMIT, **emulated.tma_order(kernel, dims))
        where = resolve(raw, mod, path.name)
        grid = tuple(shape.grid) + (1,) * (3 - len(tuple(shape.grid)))
        block = tuple(shape.block) + (1,) * (3 - len(tuple(shape.block)))
        tr = analyze(raw, kernel=spec.kernel, source=source, source_name=path.name, grid=grid, block=block,
                     where=where)
        chan.send("trace", tr.to_json().encode())

    return launch


def parse(payload: Any, spec: Any, source: str, name: str) -> Trace:
    """The parent's side: the child's JSON → ``Trace`` (refused if it is not one)."""
    if isinstance(payload, (bytes, bytearray)):
        if len(payload) > MAX_BYTES:
            raise ValueError(f"the trace of {spec.id} is larger than {MAX_BYTES} bytes; not read")
        payload = payload.decode("utf-8", "replace")
    tr = payload if isinstance(payload, Trace) else Trace.from_json(payload if isinstance(payload, str)
                                                                     else json.dumps(payload))
    if tr.source_name != name or tuple(tr.source_lines) != tuple(source.splitlines()):
        raise ValueError(f"the trace of {spec.id} does not describe the file that was sent; not read")
    return tr


def is_exercise(x: object) -> bool:
    """Whether ``tklab.trace``'s argument names an exercise (rather than being CUDA source or a file)."""
    from . import specs

    return isinstance(x, str) and "\n" not in x and len(x) < 100 and x in specs.all_ids()


def trace_exercise(exercise_id: str, *, path: str | Path | None = None, opts: Options | None = None,
                   timeout: float = 120.0) -> Trace:
    """The learner's file for ``exercise_id`` (or ``path``) traced in the sandboxed child (mode "trace")."""
    from . import runner, specs

    spec = specs.get(exercise_id)
    file = Path(path) if path is not None else learner_file(spec)
    if not file.is_file():
        raise FileNotFoundError(f"tklab.trace: no file {file} for exercise {exercise_id}")
    source = file.read_text(encoding="utf-8")
    env = {ENV: json.dumps((opts or Options()).__dict__)}
    out = runner.run_isolated(exercise_id, file, mode="trace", timeout=timeout, source=source, env=env,
                              ptx=program.ptx_for(spec, source, file.name))
    raw = (out.result or {}).get("trace")
    if not isinstance(raw, bytes):
        why = out.message or out.status
        raise TraceUnavailable(f"tklab.trace({exercise_id!r}): no trace came back from the run ({why})")
    return parse(raw, spec, source, file.name)
