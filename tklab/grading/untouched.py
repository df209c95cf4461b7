"""Where a learner's exercise file stands against the stub it started as: not started yet, or given code changed.

The stub is what ``python -m tklab exercises`` generates from the solution (``exercises.rendered``): the given
code (the solution outside its marked regions) and, for each region, a TODO block (its TODO, Goal and hints
comments, then its STUB lines or ``pass``), which is where the learner writes. The learner's file is aligned
with the stub line by line, on code only (blank lines, comments and spacing ignored, so notes never count): code
written into a TODO block, or a STUB line replaced, is the learner's work; a given line changed or removed, or
code added away from every TODO block, is a change of given code.

A check of a file with nothing written into any TODO block reports "not started: fill in the TODO at line N"
instead of a diagnosis of code the learner never wrote (the stub's placeholders fail in ways that blame given
code: a race in chapter 04's placeholder layout, a hazard below chapter 11's TODO). It is still checked as
usual, so graders score the same static checks and run as before, but its report shows where to write and the
first hint, not the findings, and no hint level is unlocked (nothing was attempted). A file whose given code is
mostly gone (another file, an exercise from an older course) is judged as it is. A started file gets a row
naming the places where its given code was changed, and is checked as it is.

A debugging exercise (``exercises.is_debug``) has no TODO: its file is a whole program with one bug, and every line
of it is the learner's to change. Its untouched file is judged as the program it is, with a note that says so
("the file as given: ...", ``AS_GIVEN``), never "not started" and never a line; a changed one is judged as it is,
with no row about given code.

Public API: ``Standing``, ``standing(spec, text)``, ``judge(res, spec, text)`` (``check``'s hook; ``check`` also
records no failed attempt for the hints when the file is not started), ``AS_GIVEN``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .exercises import COMMENT, ROOT, is_debug, rendered, source_name

#: How many places of changed given code a report names (the rest are counted).
SHOWN = 3
#: The note on a debugging exercise's untouched file: what the report below it is.
AS_GIVEN = ("the file as given: one bug, and this verdict is what it does; read it, find the bug, repair it "
            "and check again")


@dataclass(frozen=True)
class Standing:
    """A learner's file against its stub."""

    todo_lines: tuple[int, ...]  # where each TODO block is in the learner's file (1-based)
    started: bool  # code written into a TODO block (or a STUB line replaced); a debugging exercise: any code changed
    changed: tuple[tuple[int, str], ...]  # (line in the learner's file, its code) where given code was changed
    debug: bool = False  # a debugging exercise: no TODO, every line the learner's

    @property
    def not_started(self) -> str:
        """"fill in the TODO at line N" for a file with nothing written yet; "" once started, and always for a
        debugging exercise (its untouched file is a program to judge: ``as_given``)."""
        if self.started or self.debug:
            return ""
        lines = [str(n) for n in self.todo_lines]
        if len(lines) == 1:
            return f"fill in the TODO at line {lines[0]}"
        return f"fill in the TODOs at lines {', '.join(lines[:-1])} and {lines[-1]}"

    @property
    def as_given(self) -> str:
        """``AS_GIVEN`` for a debugging exercise's untouched file; "" otherwise."""
        return AS_GIVEN if self.debug and not self.started else ""

    @property
    def changed_text(self) -> str:
        """The changes of given code in a sentence; "" when there are none."""
        if not self.changed:
            return ""
        places = "; ".join(f"line {n} (`{_short(code)}`)" if code else f"line {n} (a given line removed just above it)"
                           for n, code in self.changed[:SHOWN])
        more = f", and {len(self.changed) - SHOWN} more" if len(self.changed) > SHOWN else ""
        return (f"you changed given code at {places}{more}: the exercise asks only for the TODOs, and the check "
                "judges the file as it is")


def _short(code: str, width: int = 50) -> str:
    return code if len(code) <= width else code[:width - 1] + "…"


def _code(text: str, suffix: str) -> list[str]:
    """Each line's code: comments removed (``//`` and ``/* */`` across lines in C++, ``#`` in Python, outside
    string literals), spacing collapsed; "" for a line with no code."""
    python = COMMENT.get(suffix) == "#"
    out, in_block = [], False
    for line in text.splitlines():
        code, i, quote = [], 0, ""
        while i < len(line):
            c = line[i]
            if in_block:
                if line.startswith("*/", i):
                    in_block, i = False, i + 2
                    code.append(" ")
                else:
                    i += 1
                continue
            if quote:
                code.append(c)
                if c == "\\" and i + 1 < len(line):
                    code.append(line[i + 1])
                    i += 1
                elif c == quote:
                    quote = ""
            elif c in "\"'":
                quote = c
                code.append(c)
            elif (python and c == "#") or (not python and line.startswith("//", i)):
                break
            elif not python and line.startswith("/*", i):
                in_block, i = True, i + 2
                continue
            else:
                code.append(c)
            i += 1
        out.append(" ".join("".join(code).split()))
    return out


def _align(stub: list[str], slot: list[bool], owned: list[bool], mine: list[str]) -> list[tuple[str, int, int]]:
    """The cheapest alignment of the stub's code lines with the learner's: (op, i, j) with op "=" (the same
    line), "-" (stub line i removed) or "+" (learner line j added at stub position i). Removing a line of a
    TODO block (``owned``) or adding one where a TODO block is (``slot[i]``) is free; changing given code costs
    one per line."""
    n, m = len(stub), len(mine)
    inf = n + m + 1
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    for i in range(n, -1, -1):
        row, below = cost[i], cost[i + 1] if i < n else None
        for j in range(m, -1, -1):
            if i == n and j == m:
                row[j] = 0
                continue
            best = inf
            if i < n and j < m and stub[i] == mine[j]:
                best = below[j + 1]  # type: ignore[index]
            if i < n:
                best = min(best, below[j] + (0 if owned[i] else 1))  # type: ignore[index]
            if j < m:
                best = min(best, row[j + 1] + (0 if slot[i] else 1))
            row[j] = best
    ops, i, j = [], 0, 0
    while i < n or j < m:
        here = cost[i][j]
        if i < n and j < m and stub[i] == mine[j] and cost[i + 1][j + 1] == here:
            ops.append(("=", i, j))
            i, j = i + 1, j + 1
        elif j < m and cost[i][j + 1] + (0 if slot[i] else 1) == here:
            ops.append(("+", i, j))
            j += 1
        else:
            ops.append(("-", i, j))
            i += 1
    return ops


def standing(spec: Any, text: str) -> Standing | None:
    """Where ``text`` (the learner's file for ``spec``) stands against the exercise's stub; None when the
    solution it is generated from is not here (an installed package without ``solutions/``)."""
    solution = ROOT / spec.solution
    suffix = solution.suffix
    if suffix not in COMMENT or not solution.is_file():
        return None
    stub_text, blocks = rendered(solution.read_text(), source_name(spec), suffix)
    if is_debug(spec.id):  # no TODO: untouched or not, on code only (comments and spacing do not count)
        same = [c for c in _code(stub_text, suffix) if c] == [c for c in _code(text, suffix) if c]
        return Standing((), not same, (), debug=True)
    block_of = {line: k for k, (first, last) in enumerate(blocks) for line in range(first, last + 1)}
    stub, owned, stub_at = [], [], []  # the stub's code lines, whether a TODO block holds each, their line
    for number, code in enumerate(_code(stub_text, suffix), start=1):
        if code:
            stub.append(code)
            owned.append(number in block_of)
            stub_at.append(number)
    slot = [False] * (len(stub) + 1)  # where adding a line is writing into a TODO block
    for first, last in blocks:
        inside = [i for i, at in enumerate(stub_at) if first <= at <= last]
        start = inside[0] if inside else sum(at < first for at in stub_at)
        for i in range(start, (inside[-1] + 1 if inside else start) + 1):
            slot[i] = True
    mine_code = _code(text, suffix)
    mine = [c for c in mine_code if c]
    mine_at = [n for n, c in enumerate(mine_code, start=1) if c]
    ops = _align(stub, slot, owned, mine)
    # written into a TODO block; or not recognisably the stub any more (another file, an old exercise): judged
    started = any(op == "+" and slot[i] or op == "-" and owned[i] for op, i, _ in ops) or \
        sum(op == "-" and not owned[i] for op, i, _ in ops) > max(3, len(stub) // 10)
    changed: list[tuple[int, str]] = []
    run: list[tuple[str, int, int]] = []
    for op in [*ops, ("=", len(stub), len(mine))]:  # each run of edits between equal lines
        if op[0] != "=":
            run.append(op)
            continue
        added = [(mine_at[j], mine[j]) for o, i, j in run if o == "+" and not slot[i]]
        removed = [j for o, i, j in run if o == "-" and not owned[i]]
        if added:  # given lines replaced (or code added): the new code names the place
            changed += added
        elif removed:
            changed.append((mine_at[removed[0]] if removed[0] < len(mine) else len(mine_code), ""))
        run = []
    lines = text.splitlines()
    todo = [n for n, line in enumerate(lines, start=1) if re.search(r"\bTODO: your code here\b", line)]
    if len(todo) != len(blocks):  # the TODO comments were moved or removed: where each block's code lines are
        todo = []
        for first, _ in blocks:
            before = sum(at < first for at in stub_at)
            at = next((mine_at[j] for op, i, j in ops if i >= before and j < len(mine)), len(lines))
            todo.append(at)
    return Standing(tuple(todo), started, tuple(changed))


def judge(res: Any, spec: Any, text: str) -> None:
    """``check``'s first hook, once the file is read: where it stands against its stub, on ``res``
    (``not_started``: where to write; ``given_changed``: what of the given code was changed; a debugging exercise's
    untouched file: the note ``AS_GIVEN``)."""
    where = standing(spec, text)
    if where is not None:
        res.not_started, res.given_changed = where.not_started, where.changed_text
        if where.as_given:
            res.notes.insert(0, where.as_given)
