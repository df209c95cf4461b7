"""The check report's "why" section: the worst three lines of the learner's kernel, from a trace.

``tklab.check`` asks for it when a run on the GPU was too slow (a speed target not met, or a concept floor
failed) and, on request (``check(..., trace=True)``, ``python -m tklab check --trace``), after any right run.
``python -m tklab check --json`` (what ``grade`` and ``nbgrade`` run) takes none unless ``--trace`` is given.
The trace runs in the sandboxed child like every run of learner code (``tklab.grading.traced``); a trace
that cannot be taken adds a note and never changes the verdict.

Public API: ``wanted(res, trace)``, ``add_why(res, spec, file, source, *, seed, hide)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: What the section says when a trace found nothing that stands out.
NOTHING = ("the emulator's trace found no bank conflict, uncoalesced access or wait that stands out "
           "(it cannot see instruction latency or occupancy)")


def too_slow(res: Any) -> bool:
    """A run on a GPU that was right but did not meet its speed target or a concept floor (under emulation
    nothing is timed: there a trace is taken only on request)."""
    s = res.speed or {}
    under = s.get("ratio") is not None and s.get("target") is not None and s["ratio"] < s["target"]
    return res.run_status == "ok" and res.established == "gpu" and (under or any(not f.ok for f in res.floors))


def wanted(res: Any, trace: bool | None) -> bool:
    """``trace=None``: only for a run that was too slow; True: also after a pass; False: never."""
    if trace is False or res.run_status != "ok":
        return False
    return bool(trace) or too_slow(res)


def add_why(res: Any, spec: Any, file: Path, source: str, *, seed: int | None = None,
            hide: Sequence[Any] = ()) -> None:
    """Take the trace (sandboxed child, mode "trace") and fill ``res.why`` with its worst lines."""
    from ..trace import view
    from . import cases, program, traced
    from .runner import run_isolated

    if not cases.can_run(spec):
        res.notes.append("no trace for the why: the CPU emulator cannot run this exercise here")
        return
    out = run_isolated(spec.id, file, mode="trace", timeout=120.0, seed=seed, source=source, hide=hide,
                       ptx=program.ptx_for(spec, source, file.name))
    payload = (out.result or {}).get("trace")
    if not isinstance(payload, bytes):
        res.notes.append(f"no trace for the why ({out.message or out.status})")
        return
    try:
        tr = traced.parse(payload, spec, source, file.name)
    except ValueError as e:
        res.notes.append(f"no trace for the why ({e})")
        return
    res.why = view.why(tr, limit=3) or [NOTHING]
