"""Hint ladders: four rungs per exercise, climbed one at a time, remembered in the learner's folder.

The rungs, in order:

1. **concept**: the idea and where in the chapter to look (always open);
2. **question**: a question about the learner's own last failed check, pointing at the idea the verdict is
   about (a race: which barrier; a wrong output: which index), never at the line to write (open after the
   first failed check);
3. **recipe**: the API (or the quantities) and the order to use them in, never a line of the solution (open
   after two more failed checks, three in all);
4. **code**: the answer, the solution's marked regions; shown only when asked for (``more=True``, ``--more``),
   never opened by failed checks alone.

Rungs 1-3 are written beside each solution (``solutions/<id>/hints.toml``, a drill's
``solutions/drills/<id>.hints.toml``): ``concept`` (the index's line), ``level1`` (rung 1), ``question`` (rung 2's
default) with an optional ``[questions]`` table keyed by what a failed check's verdict said, and ``level2``
(rung 3); rung 4 is read from the solution itself, so it cannot drift from it. A ``[questions]`` key is a failing
check's name (``"conflict-free tile layout"``, a concept floor's name) or a verdict's kind (``KINDS``: ``race``,
``async``, ``deadlock``, ``timeout``, ``out_of_bounds``, ``invalid``, ``wrong_output``, ``static``, ``concept``,
``crash``, ``error``); a key that is neither is an error naming the file and the key.

Which question: a check of the learner's own copy that fails records what its verdict said (``verdict_keys``: read
from the ``CheckResult`` the checker computed -- the run's status and the emulator's error class, the outputs the
checker compared, the static checks and floors it judged -- never from the learner's source or output); rung 2
shows the question of the first of those keys the file has, else the default ``question``.

``tklab.hint("ch10_flash")`` (``python -m tklab hint ch10_flash``) shows the next open rung; ``more=True``
(``--more``) asks for the next rung now; ``level=N`` (or a rung's name) shows a rung again. What a learner has
seen (each rung shown, with its time and, for a question, the verdict it was about), how often a check failed and
what the last failure's verdict said are kept in ``exercises/.hints.json`` (ignored by git; ``$TKLAB_HINT_STATE``
names another file), never in the repository's files. A FAILED check report shows rung 1.

``reached_in(folder, id)`` is the highest rung seen according to the hint state in a folder: the learner's own
view. A grade sheet does not use it: that state is written by the student, so ``grade`` records the hint level as
``unknown`` rather than take a student's word for it.

Public API: ``hint(exercise, *, more=False, level=None, state=None, terminal=False)``, ``Hint``, ``Ladder``,
``ladder(id)``, ``answer(spec)``, ``hints_file(spec)``, ``RUNGS``, ``KINDS``, ``verdict_keys(res)``,
``record_failure(id, state=None, verdict=())``, ``reached(id, state=None)``, ``reached_in(folder, id)``,
``state_path()``, ``main(argv)``.
"""

from __future__ import annotations

import argparse
import functools
import html
import json
import os
import re
import sys
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tomllib

from ..paths import REPO
from . import specs

#: The ladder's rungs, in order; rung n is ``RUNGS[n - 1]``.
RUNGS = ("concept", "question", "recipe", "code")
LEVELS = len(RUNGS)
#: Failed checks that open the question and the recipe (the code is opened by asking only).
QUESTION_AFTER, RECIPE_AFTER = 1, 3
STATE_NAME = ".hints.json"
STATE_VARIABLE = "TKLAB_HINT_STATE"
_WHAT = {1: "the concept, and where to look", 2: "a question about your last failed check",
         3: "the recipe: the API and its order", 4: "the answer's code"}
_SHOWN_KEPT = 200  # entries of a state's log of rungs shown, the newest kept

#: What a verdict can say, as the keys a ``[questions]`` table may use (beside a failing check's own name).
KINDS = {
    "race": "a shared-memory race: threads wrote and read the same bytes with no barrier between",
    "async": "an asynchronous hazard: a TMA copy, a wgmma group or a TMA store and the threads touched the same "
             "bytes with nothing ordering them",
    "deadlock": "a deadlock: every thread waits and nothing can complete what they wait for",
    "timeout": "no result within the time limit",
    "out_of_bounds": "a read or write outside an array (or a shared buffer)",
    "invalid": "an operation the hardware refuses (an mbarrier given more bytes than it expects, a misaligned "
               "copy, ...)",
    "wrong_output": "the output came back wrong",
    "static": "a check of the compiled kernel failed",
    "concept": "a concept check (what the chapter teaches beyond a right answer) failed",
    "crash": "the run crashed",
    "error": "the run failed",
}
#: A kind's more general kinds, asked about when the file has no question for the kind itself.
_BROADER = {"async": ("race",), "deadlock": ("timeout",), "timeout": ("deadlock",), "invalid": ("error",),
            "crash": ("error",), "out_of_bounds": ("error",)}
#: The GPU run's own errors (numba's, the CUDA driver's), asked about as the emulator's out-of-bounds error.
_GPU_ERRORS = ((re.compile(r"\bIndexError:|ILLEGAL_ADDRESS|MISALIGNED_ADDRESS"), "out_of_bounds"),)
#: An emulator error kind asked about under another kind's question (an address in no region is out of bounds).
_ASKED_AS = {"invalid_address": "out_of_bounds"}


@functools.cache
def _error_patterns() -> tuple[tuple[re.Pattern[str], str], ...]:
    """The run's error, by the class its report names, in ``KINDS``' order: each of the emulator's error classes
    carries its kind (``tklab.emulate.errors``), so a class added there is asked about without a copy here."""
    from ..emulate.errors import EmulationError

    def subclasses(c: type) -> list[type]:
        return [s for d in c.__subclasses__() for s in (d, *subclasses(d))]

    named = [(re.compile(rf"\b{c.__name__}:"), _ASKED_AS.get(c.kind, c.kind)) for c in subclasses(EmulationError)]
    found = [(p, k) for p, k in (*named, *_GPU_ERRORS) if k in KINDS]
    order = list(KINDS)
    return tuple(sorted(found, key=lambda pk: order.index(pk[1])))


@dataclass(frozen=True)
class Ladder:
    """An exercise's hints: ``levels[n - 1]`` is rung n's text (``levels[1]`` the default question);
    ``questions`` the questions keyed by a verdict's check or kind."""

    exercise: str
    concept: str
    levels: tuple[str, str, str, str]
    questions: dict[str, str] = field(default_factory=dict)

    def question_for(self, keys: Iterable[str]) -> tuple[str, str]:
        """``(key, question)``: the question about the first of ``keys`` (a verdict's, most telling first) that
        has one, a kind's broader kinds after it; ``("", default)`` when none has."""
        keys = list(keys)
        for key in keys + [b for k in keys for b in _BROADER.get(k, ())]:
            if key in self.questions:
                return key, self.questions[key]
        return "", self.levels[1]


def hints_file(spec: specs.Exercise) -> Path:
    """The hints live beside the solution they are about: ``hints.toml`` in an exercise's folder
    (``solutions/<id>/hints.toml``), ``<id>.hints.toml`` beside a drill (``solutions/drills/<id>.hints.toml``)."""
    solution = REPO / spec.solution
    if solution.parent.name == spec.id:
        return solution.with_name("hints.toml")
    return solution.with_name(solution.name.split(".", 1)[0] + ".hints.toml")


def answer(spec: specs.Exercise) -> str:
    """Rung 4: the solution's marked regions, each headed by where it goes; a debugging exercise's fix, as a
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


def check_names(spec: specs.Exercise) -> set[str]:
    """The names the exercise's static checks and concept floors report under (its other builds' too): what a
    ``[questions]`` key may name beside a kind."""
    names = set()
    for s in (spec, *getattr(spec, "builds", ())):
        for c in (*s.static, *s.floors):
            name = getattr(c, "name", "") or (f"SASS has {c.what}" if getattr(c, "what", "") else "")
            if name:
                names.add(name)
    return names


def _where(path: Path) -> str:
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def _text(value: Any) -> str:
    return " ".join(str(value).split())


def ladder(exercise_id: str) -> Ladder:
    """The rungs of one exercise (a missing or incomplete hints file, or a ``[questions]`` key that names no
    kind and no check of the exercise, is an error naming the file and the key)."""
    spec = specs.get(exercise_id)
    path = hints_file(spec)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{exercise_id} has no hints: {_where(path)} is missing") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{_where(path)}: not valid TOML ({e})") from None
    missing = [k for k in ("concept", "level1", "question", "level2") if not _text(data.get(k, ""))]
    if missing:
        raise ValueError(f"{_where(path)}: no {', '.join(missing)} (the key{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(repr(k) for k in missing)}: every ladder needs the concept, level1, a default "
                         "question and level2)")
    table = data.get("questions", {})
    if not isinstance(table, dict):
        raise ValueError(f"{_where(path)}: 'questions' must be a table ([questions]), not {type(table).__name__}")
    known = check_names(spec)
    questions = {}
    for key, value in table.items():
        if key not in KINDS and key not in known:
            raise ValueError(f"{_where(path)}: [questions] key {key!r} is neither a verdict kind "
                             f"({', '.join(KINDS)}) nor a check of {spec.id} ({', '.join(sorted(known)) or 'none'})")
        if not isinstance(value, str) or not _text(value):
            raise ValueError(f"{_where(path)}: [questions] key {key!r} has no question")
        questions[key] = _text(value)
    return Ladder(spec.id, _text(data["concept"]),
                  (_text(data["level1"]), _text(data["question"]), _text(data["level2"]), answer(spec)), questions)


# ---- what a failed check said --------------------------------------------------------------------------

def _error_kinds(message: str) -> list[str]:
    return [kind for pattern, kind in _error_patterns() if pattern.search(message)][:1] or ["error"]


def verdict_keys(res: Any) -> list[str]:
    """What a failed check's verdict says, as ``[questions]`` keys, most telling first: the run's failure (the
    error class the run's report names, a timeout, a crash, a wrong output), the failing static checks (each by
    name, then ``static``), the emulator's hazard run beside a GPU run, the failing concept floors (by name, then
    ``concept``). ``res`` is the ``CheckResult`` the checker computed; a crashed run's message (which quotes what
    the program printed) is not read."""
    keys: list[str] = []
    status = getattr(res, "run_status", "")
    if status == "error":
        keys += _error_kinds(getattr(res, "run_message", ""))
    elif status == "timeout":
        keys.append("timeout")
    elif status == "crashed":
        keys.append("crash")
    elif status == "wrong" and getattr(res, "mismatch", None):
        keys.append("wrong_output")
    failed = [s.name for s in getattr(res, "static", ()) if not s.ok]
    keys += failed + (["static"] if failed else [])
    hazards = getattr(res, "hazards", None)
    if hazards is not None and not hazards.ok:
        kinds = _error_kinds(hazards.detail)
        keys += ["async"] if kinds == ["error"] and "relies on timing" in hazards.detail else kinds
    floors = [f.name for f in getattr(res, "floors", ()) if not f.ok]
    keys += floors + (["concept"] if floors else [])
    return list(dict.fromkeys(k for k in keys if k))


# ---- the learner's state -------------------------------------------------------------------------------

def state_path() -> Path:
    """Where the learner's hint state lives: ``exercises/.hints.json`` (``$TKLAB_HINT_STATE`` overrides)."""
    from .exercises import EXERCISES

    named = os.environ.get(STATE_VARIABLE, "").strip()
    return Path(named) if named else EXERCISES / STATE_NAME


def _short(x: Any, n: int = 120) -> str | None:
    return x[:n] if isinstance(x, str) else None


def _clean_entry(v: dict[str, Any]) -> dict[str, Any]:
    """One exercise's state as read: counts, the last failure's verdict keys, the log of rungs shown; anything
    else (or of the wrong type) is dropped. A state written before the question rung (no ``ladder``: rungs 1-3
    were concept, recipe, code) has its highest rung moved to where that rung is now."""
    e: dict[str, Any] = {f: int(v[f]) for f in ("failed", "seen", "asked")
                         if isinstance(v.get(f), int) and not isinstance(v.get(f), bool)}
    if v.get("ladder") != LEVELS and e.get("seen", 0) >= 2:
        e["seen"] = {2: 3, 3: 4}.get(e["seen"], e["seen"])
    e["ladder"] = LEVELS
    if isinstance(v.get("verdict"), list):
        e["verdict"] = [s for s in (_short(k) for k in v["verdict"][:16]) if s]
    if isinstance(v.get("shown"), list):
        shown = []
        for s in v["shown"][-_SHOWN_KEPT:]:
            if isinstance(s, dict) and s.get("rung") in RUNGS:
                shown.append({k: t for k in ("rung", "at", "about") if (t := _short(s.get(k))) is not None})
        e["shown"] = shown
    return e


def _load(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): _clean_entry(v) for k, v in data.items() if isinstance(v, dict)}


def _save(path: Path, data: dict[str, dict[str, Any]]) -> None:
    """Write the state; a folder that cannot be written costs the memory, never the hint."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)
    except OSError:
        pass


def _entry(data: dict[str, dict[str, Any]], exercise_id: str) -> dict[str, Any]:
    e = data.setdefault(exercise_id, {})
    for f in ("failed", "seen", "asked"):
        e.setdefault(f, 0)
    e.setdefault("verdict", [])
    e.setdefault("shown", [])
    e["ladder"] = LEVELS
    return e


def _opened(e: dict[str, Any]) -> int:
    """The highest rung the failed checks have opened (never the code)."""
    return 1 + (e["failed"] >= QUESTION_AFTER) + (e["failed"] >= RECIPE_AFTER)


def _unlocked(e: dict[str, Any]) -> int:
    """The highest rung the learner may see without asking: opened by failed checks, or seen before."""
    return max(_opened(e), e["seen"])


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def record_failure(exercise_id: str, state: Path | None = None, verdict: Sequence[str] = ()) -> None:
    """A check of the learner's copy failed: one more failed check counted (the question opens at the first, the
    recipe at the third), and ``verdict`` (``verdict_keys`` of the check's result) kept as what it said."""
    path = state or state_path()
    data = _load(path)
    e = _entry(data, exercise_id)
    e["failed"] += 1
    e["verdict"] = [str(k)[:120] for k in verdict][:16]
    _save(path, data)


def reached(exercise_id: str, state: Path | None = None) -> int:
    """The highest rung the learner has seen (0: none)."""
    return _load(state or state_path()).get(exercise_id, {}).get("seen", 0)


def shown(exercise_id: str, state: Path | None = None) -> list[dict[str, str]]:
    """The rungs shown for ``exercise_id``, oldest first: ``{"rung", "at"}`` and, for a question, ``"about"``
    (the verdict key it was chosen by, "" for the default question)."""
    return _load(state or state_path()).get(exercise_id, {}).get("shown", [])


def reached_in(folder: str | os.PathLike[str], exercise_id: str) -> int:
    """The highest rung seen for ``exercise_id`` in any ``.hints.json`` inside ``folder`` (links are not
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
    """One rung of an exercise's ladder, as shown; ``about`` says which verdict a question was chosen by;
    ``note`` says how to get the next rung."""

    exercise: str
    level: int
    text: str
    note: str = ""
    about: str = ""

    @property
    def rung(self) -> str:
        return RUNGS[self.level - 1]

    def __str__(self) -> str:
        head = f"{self.exercise} · hint {self.level}/{LEVELS}, {self.rung} ({_WHAT[self.level]})"
        body = self.text if self.level == LEVELS else "\n".join(textwrap.wrap(self.text, 100))
        about = [f"Your last check: {self.about}."] if self.about else []
        return "\n".join([head, *about, body] + ([self.note] if self.note else []))

    __repr__ = __str__

    def _repr_html_(self) -> str:
        body = (f"<pre>{html.escape(self.text)}</pre>" if self.level == LEVELS
                else f"<p>{html.escape(self.text)}</p>")
        about = f"<p>Your last check: {html.escape(self.about)}.</p>" if self.about else ""
        note = f"<p><i>{html.escape(self.note)}</i></p>" if self.note else ""
        return (f"<div><b>{html.escape(self.exercise)}</b> · hint {self.level}/{LEVELS}, {self.rung} "
                f"({html.escape(_WHAT[self.level])}){about}{body}{note}</div>")


def _how_next(exercise_id: str, level: int, e: dict[str, Any], terminal: bool = False) -> str:
    """How to see the rung after ``level``: already open (by failed checks or asks), or how to open it, in the
    words of the interface the learner uses (a notebook's Python, or the command's options)."""
    if level >= LEVELS:
        return ""
    nxt = level + 1
    if terminal:
        again, now = f"python -m tklab hint {exercise_id}", f"python -m tklab hint {exercise_id} --more"
    else:
        again, now = f"tklab.hint({exercise_id!r})", f"tklab.hint({exercise_id!r}, more=True)"
    name = f"Level {nxt} ({_WHAT[nxt]})"
    if nxt == LEVELS:
        return f"{name} is shown only when you ask: {now}."
    if nxt <= _unlocked(e):
        return f"{name} is unlocked: {again} shows it."
    left = (QUESTION_AFTER if nxt == 2 else RECIPE_AFTER) - e["failed"]
    checks = "a failed check" if left == 1 and nxt == 2 else f"{left} more failed check{'s' if left != 1 else ''}"
    return f"{name} unlocks after {checks} of your exercise, or now with {now}."


def _level(level: int | str) -> int:
    """A rung by number (1..4) or by name (``RUNGS``)."""
    if isinstance(level, str) and not level.strip().isdigit():
        if level.strip() not in RUNGS:
            raise ValueError(f"hint rungs are {', '.join(RUNGS)} (or 1..{LEVELS}), not {level!r}")
        return RUNGS.index(level.strip()) + 1
    n = int(level)
    if not 1 <= n <= LEVELS:
        raise ValueError(f"hint levels are 1..{LEVELS} ({', '.join(RUNGS)}), not {level}")
    return n


def _text_of(lad: Ladder, level: int, e: dict[str, Any]) -> tuple[str, str, str]:
    """(text, the verdict key it was chosen by, that verdict in words) of one rung for this learner."""
    if level != 2:
        return lad.levels[level - 1], "", ""
    key, text = lad.question_for(e["verdict"])
    said = KINDS.get(key, f"the check {key!r} failed") if key else ""
    return text, key, said


def hint(exercise: str, *, more: bool = False, level: int | str | None = None, state: Path | None = None,
         terminal: bool = False) -> Hint:
    """The next open rung of ``exercise`` (an id or a unique prefix); see the module docstring.
    ``terminal``: the notes name ``python -m tklab hint``'s options, not Python's (what ``main`` passes)."""
    spec = specs.find(exercise)
    lad = ladder(spec.id)
    path = state or state_path()
    data = _load(path)
    e = _entry(data, spec.id)
    if level is not None:
        want = _level(level)
        if want > _unlocked(e) and not more:
            at = max(1, e["seen"])
            text, _key, said = _text_of(lad, at, e)
            return Hint(spec.id, at, text, f"Level {want} is not unlocked yet. " + _how_next(spec.id, at, e, terminal),
                        said)
        show = want
    elif more:
        show = min(LEVELS, e["seen"] + 1)
    else:
        show = max(1, min(LEVELS, e["seen"] + 1, _unlocked(e)))
    if show > _unlocked(e):
        e["asked"] += 1
    e["seen"] = max(e["seen"], show)
    text, key, said = _text_of(lad, show, e)
    e["shown"] = (e["shown"] + [{"rung": RUNGS[show - 1], "at": _now(), **({"about": key} if show == 2 else {})}]
                  )[-_SHOWN_KEPT:]
    _save(path, data)
    note = _how_next(spec.id, show, e, terminal) if show == e["seen"] else ""
    if show == LEVELS:
        check = f"python -m tklab check {spec.id}" if terminal else "tklab.check"
        what = "the fix, as a diff of your file as it was given" if spec.kind == "debug" else \
            "the reference solution's code for the TODOs"
        note = f"This is {what}; {check} tells you if yours works."
    return Hint(spec.id, show, text, note, said)


def failed_line(exercise_id: str) -> str:
    """What a FAILED report shows: rung 1 and how to climb ("" when there is no ladder)."""
    try:
        lad = ladder(exercise_id)
    except (FileNotFoundError, ValueError, KeyError):
        return ""
    return (f"{lad.levels[0]} (more: tklab.hint({exercise_id!r}) in a notebook, python -m tklab hint {exercise_id} "
            "in a terminal)")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tklab hint ID [--more] [--level N|RUNG]``."""
    ap = argparse.ArgumentParser(prog="python -m tklab hint", description="Show the next hint of an exercise.")
    ap.add_argument("exercise", help="exercise id or unique prefix (ch10_flash, ch04_padding …)")
    ap.add_argument("--more", action="store_true", help="show the next rung now (the code only this way)")
    ap.add_argument("--level", default=None,
                    help=f"show this rung again, if unlocked: 1-{LEVELS} or {', '.join(RUNGS)}")
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        print(hint(args.exercise, more=args.more, level=args.level, terminal=True))
    except (KeyError, ValueError, FileNotFoundError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    return 0
