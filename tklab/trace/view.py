"""The source view: the learner's lines annotated with bank conflicts, sectors per request and waits, worst first.

Public API: ``LineNote``, ``line_notes(trace)``, ``text(trace, limit=None)``, ``html(trace, limit=None)``,
``why(trace, limit=3)`` (the check report's short "why" lines).
"""

from __future__ import annotations

import html as _html
from collections import defaultdict
from dataclasses import dataclass, field

from .model import Trace

#: Waits shorter than this on average (logical steps: about one memory instruction each) are not counted as a
#: cost: threads of a block reach a barrier a few instructions apart without anything being slow.
MIN_WAIT = 32


@dataclass
class LineNote:
    """What one source line cost beyond the ideal (``excess``: extra wavefronts + extra sectors + wait steps)."""

    line: int
    text: str
    excess: float = 0.0
    notes: list[str] = field(default_factory=list)


def _lanes(group: tuple[int, ...]) -> str:
    if len(group) > 2 and list(group) == list(range(group[0], group[-1] + 1)):
        return f"lanes {group[0]}-{group[-1]}"
    return "lanes " + ",".join(map(str, group[:8])) + ("…" if len(group) > 8 else "")


def line_notes(trace: Trace) -> list[LineNote]:
    """One note per source line that the trace saw do something, worst first."""
    by: dict[int, LineNote] = {}

    def note(line: int, text: str) -> LineNote:
        return by.setdefault(line, LineNote(line, text))

    for s in trace.shared:
        n = note(s.line, s.text)
        n.excess += s.conflicts
        what = {"ld": "shared load", "st": "shared store"}.get(s.op, s.op)
        msg = f"{what}: {s.per_request:.3g} wavefronts per request (ideal {s.ideal / max(1, s.executions):.3g})"
        if s.conflicts:
            msg += f", {s.ways}-way bank conflict"
            if s.colliding:
                msg += f" ({_lanes(s.colliding[0])} share a bank)"
        else:
            msg += ", no bank conflict"
        n.notes.append(msg)
    for g in trace.globals_:
        n = note(g.line, g.text)
        n.excess += max(0.0, g.sectors - g.ideal_sectors_per_request * g.requests)
        what = {"ld": "global load", "st": "global store", "atom": "global atomic"}.get(g.op, g.op)
        n.notes.append(f"{what}: {g.sectors_per_request:.3g} sectors per request "
                       f"(ideal {g.ideal_sectors_per_request:.3g} for {g.width}-byte lanes)")
    waits: dict[tuple[int, str], list[int]] = defaultdict(list)
    for e in trace.events:
        if e.end is not None:
            waits[(e.line, e.kind)].append(e.duration)
    for (line, kind), ds in waits.items():
        n = note(line, trace.source_lines[line - 1].strip() if 0 < line <= len(trace.source_lines) else "")
        waited = [d for d in ds if d > 0]
        if sum(ds) >= MIN_WAIT * len(ds):  # shorter: lanes a few instructions apart, not a stall
            n.excess += sum(ds) / max(1, len(trace.warps()))
        name = {"barrier_wait": "barrier", "mbarrier_wait": "mbarrier wait"}.get(kind, kind)
        n.notes.append(f"{name}: waited {len(waited)} of {len(ds)} times, "
                       f"{sum(ds) / max(1, len(ds)):.0f} steps on average")
    return sorted(by.values(), key=lambda n: (-n.excess, n.line))


def text(trace: Trace, limit: int | None = None) -> str:
    notes = line_notes(trace)[:limit]
    out = [f"{trace.kernel} ({trace.source_name}), grid {trace.grid}, block {trace.block}, "
           f"{trace.blocks_traced} block(s) traced"]
    for n in notes:
        where = f"line {n.line}" if n.line else "(library code)"
        out.append(f"{where}: {n.text}")
        out.extend(f"    {m}" for m in n.notes)
    for m in trace.loops:
        mix = ", ".join(f"{v:g} {k}" for k, v in m.per_iteration)
        out.append(f"loop at line {m.first_line} ({m.iterations:g} iterations per warp): per iteration {mix}")
    out.extend(f"note: {x}" for x in trace.notes)
    return "\n".join(out)


def html(trace: Trace, limit: int | None = None) -> str:
    rows = []
    for n in line_notes(trace)[:limit]:
        cls = "bad" if n.excess > 0 else "ok"
        rows.append(f"<tr class='{cls}'><td>{n.line or ''}</td><td><code>{_html.escape(n.text)}</code></td>"
                    f"<td>{'<br>'.join(_html.escape(m) for m in n.notes)}</td></tr>")
    return ("<table class='tk-trace'><tr><th>line</th><th>source</th><th>what the emulator saw</th></tr>"
            + "".join(rows) + "</table>")


def why(trace: Trace, limit: int = 3) -> list[str]:
    """The worst lines, one sentence each (the check report's "why" section): only lines with a cost."""
    out = []
    for n in line_notes(trace):
        if n.excess <= 0 or len(out) >= limit:
            continue
        out.append(f"line {n.line}: {n.text} -- " + "; ".join(n.notes))
    return out
