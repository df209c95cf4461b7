"""Which exponentials the SASS issues while a wgmma group is still in flight. No GPU needed.

Chapter 10's key loop issues S_j = Q K_j^T and O += P_{j-1} V_{j-1} back to back, waits for S_j alone
(``wgmma.wait_group 1``), computes block j's softmax, and only then waits for P V (``wgmma.wait_group 0``),
so the special-function units compute the exponentials while the tensor cores still run the product. That
order is the source's and the PTX's; the order that runs is the SASS's, and ptxas may move the second wait
above the exponentials. Then nothing overlaps, whatever the source says.

What the SASS says, instruction by instruction:

* a wgmma group ends with the ``HGMMA`` that carries ``gsb0`` (the group's commit): one more group in flight;
* ``WARPGROUP.DEPBAR.LE gsb0, N`` waits until at most N groups are in flight (``0x1``: all but the newest,
  so S_j is done and P V may still run; ``0x0``: all of them);
* an exponential is a ``MUFU.EX2``; it runs *under a product* when a group is in flight where it is issued.

The key loop is the innermost loop (``sass.loops``) that holds both HGMMA and MUFU.EX2. It is walked in the
order ptxas laid it out, round after round from no group in flight until the number in flight at its top
repeats (a group issued at the end of one step may still run at the start of the next); the last round's
exponentials are counted. Branches inside the loop (a causal mask, a skipped rescale) are read in
layout order, the order ptxas scheduled them in; the count is of instructions, not of executions.

Public API: ``softmax_under_pv(sass) -> Overlap``, ``outline(sass) -> list[str]`` (the key loop as the rule
reads it, for a lesson), ``Overlap``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import sass as _sass

_WAIT = re.compile(r"^\s*gsb0\s*,\s*(0x[0-9a-f]+|\d+)\b")  # WARPGROUP.DEPBAR.LE's operands
_COMMIT = re.compile(r"\bgsb0\b")  # on the HGMMA that ends a group


@dataclass(frozen=True)
class Overlap:
    """Where a kernel's key loop issues its exponentials: ``under`` of its ``total`` MUFU.EX2 with a wgmma group
    in flight. ``waits_for_one`` says whether some wait in the loop leaves a group running (the source asked
    for an overlap). ``loop`` is False when no loop holds both HGMMA and MUFU.EX2 (the counts are then 0)."""

    under: int
    total: int
    loop: bool
    waits_for_one: bool = False

    @property
    def share(self) -> float:
        """``under / total`` (0 without exponentials)."""
        return self.under / self.total if self.total else 0.0

    def __str__(self) -> str:
        if not self.loop:
            return "no loop issues both wgmma (HGMMA) and exponentials (MUFU.EX2)"
        return f"{self.under} of the key loop's {self.total} exponentials (MUFU.EX2) issued while a wgmma group runs"


def _events(body: list[tuple[int, str, str]], in_flight: int) -> list[tuple[str, str, int]]:
    """The loop's body, one round from ``in_flight`` groups, as (kind, opcode, groups in flight after it) for
    what the rule reads: ``"commit"`` (an HGMMA ending a group), ``"wait"``, ``"exp"`` (MUFU.EX2), ``"arrive"`` (an
    mbarrier arrive, e.g. a stage handed back), and ``"hgmma"`` for the other HGMMA of a group."""
    out = []
    for _, op, rest in body:
        base = op.split(".")[0]
        if base == "HGMMA":
            committed = _COMMIT.search(rest) is not None
            in_flight += committed
            out.append(("commit" if committed else "hgmma", op, in_flight))
        elif op == "WARPGROUP.DEPBAR.LE" and (m := _WAIT.match(rest)):
            in_flight = min(in_flight, int(m.group(1), 0))
            out.append(("wait", f"{op} gsb0, {m.group(1)}", in_flight))
        elif op.startswith("MUFU.EX2"):
            out.append(("exp", op, in_flight))
        elif op.startswith("SYNCS.ARRIVE"):
            out.append(("arrive", op, in_flight))
    return out


def _key_loop(sass: str) -> tuple[list[tuple[str, str, int]], bool]:
    """The key loop's events in its settled round (see the module docstring), and whether there is one."""
    keyed = [body for body in _sass.loops(sass)
             if {"HGMMA", "MUFU"} <= {op.split(".")[0] for _, op, _ in body}
             and any(op.startswith("MUFU.EX2") for _, op, _ in body)]
    if not keyed:
        return [], False
    body = min(keyed, key=len)  # the innermost: an outer (persistent) loop holds the key loop whole
    start = 0
    for _ in range(8):  # the count at the top settles in a round or two; a loop that never waits keeps growing
        events = _events(body, start)
        end = events[-1][2] if events else start
        if end == start:
            break
        start = end
    return events, True


def softmax_under_pv(sass: str) -> Overlap:
    """The exponentials of the kernel's key loop that the SASS issues while a product still runs."""
    events, found = _key_loop(sass)
    if not found:
        return Overlap(0, 0, loop=False)
    return Overlap(under=sum(k == "exp" and n > 0 for k, _, n in events), total=sum(k == "exp" for k, _, _ in events),
                   loop=True, waits_for_one=any(k == "wait" and n > 0 for k, _, n in events))


def outline(sass: str) -> list[str]:
    """The key loop as the rule reads it, one line per step in layout order: each wgmma group (its HGMMA count),
    each wait, each mbarrier arrive, each run of exponentials, with the groups in flight after it."""
    events, _ = _key_loop(sass)
    lines: list[str] = []
    hgmma = exps = 0

    def line(what: str, n: int) -> None:
        lines.append(f"{what:<54} {n} in flight")

    for i, (kind, op, n) in enumerate(events):
        if kind == "hgmma":
            hgmma += 1
        elif kind == "commit":
            line(f"{hgmma + 1:3d} × HGMMA: a wgmma group (the last: gsb0)", n)
            hgmma = 0
        elif kind == "exp":
            exps += 1
            nxt = events[i + 1] if i + 1 < len(events) else None
            if nxt is None or nxt[0] != "exp" or nxt[2] != n:
                line(f"{exps:3d} × MUFU.EX2 (exponentials)", n)
                exps = 0
        else:
            line(f"      {op}" + (" (a stage handed back)" if kind == "arrive" else ""), n)
    return lines
