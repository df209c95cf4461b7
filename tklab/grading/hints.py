"""Hint ladders: three levels per exercise, unlocked one at a time, remembered in the learner's folder.

Level 1 names the concept and where in the chapter to look; level 2 names the API (or the quantities) and the order
to use them in, never a line of the solution; level 3 is the answer: the solution's marked regions. Levels 1 and 2
are written beside each solution (``solutions/<id>/hints.toml``, a drill's ``solutions/drills/<id>.hints.toml``:
``concept``, ``level1``, ``level2``); level 3 is read from the solution itself, so it cannot drift from it.

``tklab.hint("ch10_flash")`` (``python -m tklab hint ch10_flash``) shows the next level once it is
unlocked: level 1 always; each failed check of the learner's copy unlocks one more; ``more=True``
(``--more``) asks for the next level now. ``level=N`` shows a level again. What a learner has seen and
how often a check failed are kept in ``exercises/.hints.json`` (ignored by git; ``$TKLAB_HINT_STATE``
names another file), never in the repository's files. A FAILED check report shows the level-1 hint.

``reached_in(folder, id)`` is the highest level seen according to the hint state in a folder: the learner's
own view. A grade sheet does not use it: that state is written by the student, so ``grade`` records the hint
level as ``unknown`` rather than take a student's word for it.

Public API: ``hint(exercise, *, more=False, level=None, state=None, terminal=False)``, ``Hint``, ``Ladder``,
``ladder(id)``, ``answer(spec)``, ``hints_file(spec)``, ``record_failure(id, state=None)``,
``reached(id, state=None)``, ``reached_in(folder, id)``, ``state_path()``, ``main(argv)``.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tomllib

from ..paths import REPO
from . import specs

LEVELS = 3
STATE_NAME = ".hints.json"
STATE_VARIABLE = "TKLAB_HINT_STATE"
_WHAT = {1: "the concept, and where to look", 2: "the API and its order", 3: "the answer"}


@dataclass(frozen=True)
class Ladder:
    """An exercise's hints: ``levels[0]`` is level 1."""

    exercise: str
    concept: str
    levels: tuple[str, str, str]


def hints_file(spec: specs.Exercise) -> Path:
    """The hints live beside the solution they are about: ``hints.toml`` in an exercise's folder
    (``solutions/<id>/hints.toml``), ``<id>.hints.toml`` beside a drill (``solutions/drills/<id>.hints.toml``)."""
    solution = REPO / spec.solution
    if solution.parent.name == spec.id:
        return solution.with_name("hints.toml")
    return solution.with_name(solution.name.split(".", 1)[0] + ".hints.toml")


def answer(spec: specs.Exercise) -> str:
    """Level 3: the solution's marked regions, each headed by where it goes; a debugging exercise's fix, as a
    diff of its file."""
    from .exercises import fix_diff, is_debug, regions, render, source_name

    path = REPO / spec.solution
    text = path.read_text()
    if is_debug(spec.id):
        return f"the fix of exercises/{spec.exercise_file}, as a diff:\n" + fix_diff(
            text, source_name(spec), path.suffix, f"exercises/{spec.exercise_file}").rstrip("\n")
    todos = [n for n, line in enumerate(render(text, source_name(spec), path.suffix).splitlines(), start=1)
             if "TODO: your code here" in line]
    parts = []
    for r, at in zip(regions(text, path.suffix, spec.solution), todos, strict=True):
        body = textwrap.dedent("\n".join(r.body)).strip("\n")
        parts.append(f"exercises/{spec.exercise_file}, the TODO at line {at}:\n{body}")
    return "\n\n".join(parts)


def ladder(exercise_id: str) -> Ladder:
    """The three levels of one exercise (a missing or incomplete hints file is an error naming it)."""
    spec = specs.get(exercise_id)
    path = hints_file(spec)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{exercise_id} has no hints: {path.relative_to(REPO)} is missing") from None
    missing = [k for k in ("concept", "level1", "level2") if not str(data.get(k, "")).strip()]
    if missing:
        raise ValueError(f"{path.relative_to(REPO)}: no {', '.join(missing)}")
    text = [" ".join(str(data[k]).split()) for k in ("level1", "level2")]
    return Ladder(spec.id, " ".join(str(data["concept"]).split()), (text[0], text[1], answer(spec)))


# ---- the learner's state -------------------------------------------------------------------------------

def state_path() -> Path:
    """Where the learner's hint state lives: ``exercises/.hints.json`` (``$TKLAB_HINT_STATE`` overrides)."""
    from .exercises import EXERCISES

    named = os.environ.get(STATE_VARIABLE, "").strip()
    return Path(named) if named else EXERCISES / STATE_NAME


def _load(path: Path) -> dict[str, dict[str, int]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    out = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out[str(k)] = {f: int(v[f]) for f in ("failed", "seen", "asked") if isinstance(v.get(f), int)}
    return out


def _save(path: Path, data: dict[str, dict[str, int]]) -> None:
    """Write the state; a folder that cannot be written costs the memory, never the hint."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)
    except OSError:
        pass


def _entry(data: dict[str, dict[str, int]], exercise_id: str) -> dict[str, int]:
    e = data.setdefault(exercise_id, {})
    for f in ("failed", "seen", "asked"):
        e.setdefault(f, 0)
    return e


def _unlocked(e: dict[str, int]) -> int:
    return min(LEVELS, 1 + e["failed"] + e["asked"])


def record_failure(exercise_id: str, state: Path | None = None) -> None:
    """A check of the learner's copy failed: one more level is unlocked."""
    path = state or state_path()
    data = _load(path)
    _entry(data, exercise_id)["failed"] += 1
    _save(path, data)


def reached(exercise_id: str, state: Path | None = None) -> int:
    """The highest level the learner has seen (0: none)."""
    return _load(state or state_path()).get(exercise_id, {}).get("seen", 0)


def reached_in(folder: str | os.PathLike[str], exercise_id: str) -> int:
    """The highest hint level seen for ``exercise_id`` in any ``.hints.json`` inside ``folder`` (links are not
    followed): what the folder's own hint state says, for the learner; not a grade input (see the module
    docstring)."""
    best = 0
    root = Path(folder)
    for dirpath, _dirs, files in os.walk(root, followlinks=False):
        if STATE_NAME in files:
            p = Path(dirpath) / STATE_NAME
            if not p.is_symlink():
                best = max(best, min(LEVELS, reached(exercise_id, p)))
    return best


# ---- showing a hint ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Hint:
    """One level of an exercise's ladder, as shown; ``note`` says how to get the next one."""

    exercise: str
    level: int
    text: str
    note: str = ""

    def __str__(self) -> str:
        head = f"{self.exercise} · hint {self.level}/{LEVELS} ({_WHAT[self.level]})"
        body = self.text if self.level == LEVELS else "\n".join(textwrap.wrap(self.text, 100))
        return "\n".join([head, body] + ([self.note] if self.note else []))

    __repr__ = __str__

    def _repr_html_(self) -> str:
        body = (f"<pre>{html.escape(self.text)}</pre>" if self.level == LEVELS
                else f"<p>{html.escape(self.text)}</p>")
        note = f"<p><i>{html.escape(self.note)}</i></p>" if self.note else ""
        return (f"<div><b>{html.escape(self.exercise)}</b> · hint {self.level}/{LEVELS} "
                f"({html.escape(_WHAT[self.level])}){body}{note}</div>")


def _how_next(exercise_id: str, level: int, unlocked: int, terminal: bool = False) -> str:
    """How to see the level after ``level``: already unlocked (by failed checks or asks), or how to unlock it,
    in the words of the interface the learner uses (a notebook's Python, or the command's options)."""
    if level >= LEVELS:
        return ""
    nxt = level + 1
    if terminal:
        again, now = f"python -m tklab hint {exercise_id}", f"python -m tklab hint {exercise_id} --more"
    else:
        again, now = f"tklab.hint({exercise_id!r})", f"tklab.hint({exercise_id!r}, more=True)"
    if nxt <= unlocked:
        return f"Level {nxt} ({_WHAT[nxt]}) is unlocked: {again} shows it."
    return f"Level {nxt} ({_WHAT[nxt]}) unlocks after a failed check of your exercise, or now with {now}."


def hint(exercise: str, *, more: bool = False, level: int | None = None, state: Path | None = None,
         terminal: bool = False) -> Hint:
    """The next unlocked hint of ``exercise`` (an id or a unique prefix); see the module docstring.
    ``terminal``: the notes name ``python -m tklab hint``'s options, not Python's (what ``main`` passes)."""
    spec = specs.find(exercise)
    lad = ladder(spec.id)
    path = state or state_path()
    data = _load(path)
    e = _entry(data, spec.id)
    if level is not None:
        if not 1 <= level <= LEVELS:
            raise ValueError(f"hint levels are 1..{LEVELS}, not {level}")
        if level > max(e["seen"], _unlocked(e)) and not more:
            shown = max(1, e["seen"])
            return Hint(spec.id, shown, lad.levels[shown - 1],
                        f"Level {level} is not unlocked yet. " + _how_next(spec.id, shown, _unlocked(e), terminal))
        show = level
    elif more:
        show = min(LEVELS, e["seen"] + 1)
    else:
        show = min(LEVELS, e["seen"] + 1, _unlocked(e)) or 1
    if show > _unlocked(e):
        e["asked"] += show - _unlocked(e)
    e["seen"] = max(e["seen"], show)
    _save(path, data)
    note = _how_next(spec.id, show, _unlocked(e), terminal) if show == e["seen"] else ""
    if show == LEVELS:
        check = f"python -m tklab check {spec.id}" if terminal else "tklab.check"
        note = f"This is the reference solution's code for the TODOs; {check} tells you if yours works."
    return Hint(spec.id, show, lad.levels[show - 1], note)


def failed_line(exercise_id: str) -> str:
    """What a FAILED report shows: the level-1 hint and how to get more ("" when there is no ladder)."""
    try:
        lad = ladder(exercise_id)
    except (FileNotFoundError, ValueError, KeyError):
        return ""
    return (f"{lad.levels[0]} (more: tklab.hint({exercise_id!r}) in a notebook, python -m tklab hint {exercise_id} "
            "in a terminal)")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tklab hint ID [--more] [--level N]``."""
    ap = argparse.ArgumentParser(prog="python -m tklab hint", description="Show the next hint of an exercise.")
    ap.add_argument("exercise", help="exercise id or unique prefix (ch10_flash, ch04_padding …)")
    ap.add_argument("--more", action="store_true", help="unlock and show the next level now")
    ap.add_argument("--level", type=int, default=None, help="show this level (1-3), if unlocked")
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        print(hint(args.exercise, more=args.more, level=args.level, terminal=True))
    except (KeyError, ValueError, FileNotFoundError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    return 0

