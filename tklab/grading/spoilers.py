"""Spoilers: an exercise's answer lines, and where they show before the exercise does.

An answer line is a code line of a solution's marked regions (``tklab.grading.exercises.regions``),
compared whitespace-normalised: comments dropped, all whitespace removed, a leading ``return`` and a
trailing ``;`` ignored. Lines that tell nothing are not answers: those shorter than ``MIN_CHARS``
normalised characters, bare calls without arguments (``__syncthreads();``, ``cp_async_commit();``),
``#pragma`` lines, lines that say nothing beyond syntax (``_SYNTAX_ONLY``: the opening of a call or of inline
assembly with nothing in it yet, ``asm volatile(``; a bare counting loop header over a plain bound, ``for (int w = 0;
w < CONSUMERS; ++w)``; a condition on one name alone, ``if not causal:``; the ceil-div idiom on two plain operands,
``-(-n // d)``, alone or assigned to one name), and lines the solution also has outside its regions (code the
exercise gives).

``scan(text)`` finds the answer lines inside any text (a notebook cell, a stored output, an exercise
file, a hint); ``exercise_cell(cells, spec)`` is where a chapter's exercise starts (its heading, its link,
or its ``tklab.check`` call): what precedes it must not hold its answer lines. ``tests/test_spoilers.py``
holds the notebooks and the exercise files to that; ``tests/test_hints.py`` the hints' levels 1 and 2.

Public API: ``MIN_CHARS``, ``normalise(line, prefix)``, ``answer_lines(spec)``, ``given_lines(spec)``,
``scan(text, answers)``,
``exercise_cell(cells, spec)``, ``Hit``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..paths import REPO
from .exercises import COMMENT, regions

#: Fewer normalised characters than this say too little to give an answer away (``acc=0.0f``).
MIN_CHARS = 12
_BARE_CALL = re.compile(r"^[\w:.<>,\[\]]+\(\)$")  # a call with no arguments: it names a step, not an answer
#: Normalised lines whose every character is syntax any such program has; none names what to compute.
_SYNTAX_ONLY = (
    re.compile(r"^\w+\($"),  # an opening with nothing in it yet: `asm volatile(` (whitespace gone: `asmvolatile(`)
    re.compile(r"^for\(int(\w+)=0;\1<\w+;\+\+\1\)\{?$"),  # a bare counting loop header: 0 .. a bound of one name
    re.compile(r"^(if|elif|while)(not)?\w+:$|^(if|while)\(!?\w+\)\{?$"),  # a condition on one name alone
    re.compile(r"^(\w+=)?-\(-\w+//\w+\)$"),  # the ceil-div idiom on two plain operands: -(-n // d)
)


def _strip_comment(line: str, prefix: str) -> str:
    if prefix == "#":
        return re.sub(r"\s#\s.*$|^\s*#(?!pragma).*$", "", line)
    return re.sub(r"//.*$", "", line)


def normalise(line: str, prefix: str = "//") -> str:
    """``line`` without its comment and whitespace, a leading ``return`` and a trailing ``;``."""
    code = "".join(_strip_comment(line, prefix).split())
    code = code.removeprefix("return").removesuffix(";")
    return code


def _meaningful(code: str) -> bool:
    return (len(code) >= MIN_CHARS and not _BARE_CALL.match(code) and not code.startswith("#pragma")
            and not any(p.match(code) for p in _SYNTAX_ONLY))


def _split(spec: Any) -> tuple[dict[str, str], set[str]]:
    """The solution's region lines ({normalised: original}, meaningful ones) and its given lines (normalised)."""
    path = REPO / spec.solution
    text = path.read_text()
    prefix = COMMENT[path.suffix]
    lines = text.splitlines()
    inside: set[int] = set()
    out: dict[str, str] = {}
    for r in regions(text, path.suffix, spec.solution):
        inside.update(range(r.begin, r.end + 1))
        for line in r.body:
            code = normalise(line, prefix)
            if _meaningful(code):
                out.setdefault(code, line.strip())
    return out, {normalise(ln, prefix) for n, ln in enumerate(lines, start=1) if n not in inside}


def answer_lines(spec: Any) -> dict[str, str]:
    """{normalised: original line} of the exercise's answer lines (see the module docstring)."""
    regioned, given = _split(spec)
    return {k: v for k, v in regioned.items() if k not in given}


def given_lines(spec: Any) -> set[str]:
    """The code the exercise gives (its solution outside the marked regions), normalised: what its chapter teaches
    by showing, so a later exercise whose answer repeats such a line has not been given away by it."""
    return _split(spec)[1]


@dataclass(frozen=True)
class Hit:
    """An answer line found in a text: which line of the text (1-based), and which answer."""

    line: int
    answer: str
    text: str


def _forms(code: str) -> set[str]:
    """The answer, and the answer without its leading namespace (``warpgroup::``), if that still says enough."""
    bare = re.sub(r"^(\w+::)+", "", code)
    return {code, bare} if _meaningful(bare) else {code}


def scan(text: str, answers: dict[str, str]) -> list[Hit]:
    """Every line of ``text`` that contains an answer line (whitespace-normalised, with or without its
    leading namespace)."""
    forms = {code: _forms(code) for code in answers}
    hits = []
    for n, line in enumerate(text.splitlines(), start=1):
        squeezed = "".join(line.split())
        for code, original in answers.items():
            if any(f in squeezed for f in forms[code]):
                hits.append(Hit(n, original, line.strip()[:160]))
    return hits


def exercise_cell(cells: list[dict[str, Any]], spec: Any) -> int | None:
    """Index of the first cell of a chapter that introduces ``spec``: its heading or name in a markdown
    heading, a link to its file, or its ``tklab.check`` call. None: the chapter does not mention it."""
    file = Path(spec.exercise_file).as_posix()
    for i, cell in enumerate(cells):
        src = "".join(cell.get("source", ""))
        if cell.get("cell_type") == "markdown":
            heading = any(ln.startswith("#") and spec.id in ln for ln in src.splitlines())
            if heading or f"(../exercises/{file})" in src:
                return i
        elif re.search(rf"tklab\.check\(\s*[\"']{re.escape(spec.id)}[\"']", src):
            return i
    return None
