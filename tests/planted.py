"""Planted mistakes: each exercise's ``planted.toml`` (``solutions/<id>/planted.toml``, for every exercise of the
registry) applied to its solution, and the real check run on the result (``python -m tklab check``), for the
planted-mistake suites (tests/test_planted_mistakes.py, its GPU twin, bench/planted_cpu.py and bench/planted_gpu.py).

A mutation is a list of edits; an edit replaces ``find`` (code, never a comment: hint comments change) by
``replace``, and ``find`` must occur exactly once in the text the edits before it left (in the text after
``after`` and before the next ``before`` when those are given). An anchor that is gone or ambiguous raises
``AnchorError`` naming it, so a suite never silently checks the unchanged solution. A suite's ``least``, ``slow``
and ``caught_by_run`` are its ``Suite``'s (the file's format: solutions/README.md).

A debugging exercise's suite (``exercises.is_debug``) edits the program the learner is given, its generated file with
the bug in it (``base``), not the solution: an entry with no edit (``edit = []``) is that file as given, a mistake
that must fail; the right fix is a benign variant, wrong fixes are mistakes.

Public API: ``Mutation``, ``Suite``, ``AnchorError``, ``load(exercise_id)``, ``suite(exercise_id)``,
``exercises()``, ``apply(text, mutation)``, ``solution(exercise_id)``, ``base(exercise_id)``,
``mutated_file(mutation, folder)``,
``run_check(path, exercise_id, seed, bench=False)``, ``run_all(jobs)``, ``Verdict``, ``FULL``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
PLANTED = "planted.toml"
#: Every variant on the CPU, ``extra`` ones too (they are beyond their suite's core: CI time); a GPU runs all.
FULL = os.environ.get("TKLAB_PLANTED_FULL", "") in ("1", "true", "yes")


class AnchorError(ValueError):
    """A mutation's anchor text is not in the solution exactly once."""


@dataclass(frozen=True)
class Mutation:
    exercise: str
    name: str
    description: str
    benign: bool
    edits: tuple[dict[str, str], ...]
    needs: str = ""  # what the emulator must model for the CPU path to see it (documentation)
    speed: bool = False  # graded on a GPU by a speed floor too: its GPU check times it
    cpu_misses: str = ""  # why the CPU emulator cannot see this mistake (known gap; the test is a strict xfail)
    shows: str = ""  # words the failing verdict must tell (``Verdict.says``: the message this mistake must get)
    extra: bool = False  # beyond its suite's core: on the CPU only with TKLAB_PLANTED_FULL=1 (a GPU runs it always)

    @property
    def id(self) -> str:
        return f"{self.exercise}:{self.name}"


@dataclass(frozen=True)
class Suite:
    """One exercise's planted suite: its mutations and what the file says of the suite as a whole."""

    exercise: str
    mutations: tuple[Mutation, ...]
    least: tuple[int, int]  # the fewest (mistakes, benign variants) in its core (every mutation but ``extra`` ones)
    slow: bool = False  # every check builds a large kernel: pytest marker ``planted_slow`` (its own make step)
    caught_by_run: bool = False  # a mistake that compiles and passes the static checks fails in the run itself


def path(exercise_id: str) -> Path:
    """The exercise's planted suite: ``planted.toml`` in its folder."""
    from tklab.grading import specs

    return specs.folder(exercise_id) / PLANTED


def exercises() -> list[str]:
    """Every exercise of the registry (its folder holds a spec); each must have its planted suite."""
    from tklab.grading import specs

    return [i for i in specs.all_ids() if specs.spec_file(i) is not None]


def suite(exercise_id: str) -> Suite:
    """The suite of one exercise: its mistakes, then its benign variants, and the file's settings."""
    from tklab.grading import specs

    file = path(exercise_id)
    data = tomllib.loads(file.read_text())
    if data.get("exercise", exercise_id) != exercise_id:
        raise ValueError(f"{file} names exercise {data.get('exercise')!r}")
    out = []
    for kind, benign in (("mistake", False), ("benign", True)):
        for m in data.get(kind, []):
            if not m.get("edit") and not (specs.get(exercise_id).kind == "debug" and not benign):
                raise ValueError(f"{file}: {m['name']} has no edit (only a debugging exercise's mistake may: the file "
                                 "as given)")
            out.append(Mutation(exercise_id, m["name"], m["description"], benign, tuple(m.get("edit", ())),
                                m.get("needs", ""), bool(m.get("speed", False)), m.get("cpu_misses", ""),
                                m.get("shows", ""), bool(m.get("extra", False))))
    names = [m.name for m in out]
    if len(set(names)) != len(names):
        raise ValueError(f"{file}: duplicate names")
    least = data.get("least")
    if not (isinstance(least, list) and len(least) == 2 and all(isinstance(n, int) for n in least)):
        raise ValueError(f"{file}: least = [mistakes, benign variants] is missing")
    return Suite(exercise_id, tuple(out), (least[0], least[1]), bool(data.get("slow", False)),
                 bool(data.get("caught_by_run", False)))


def load(exercise_id: str) -> list[Mutation]:
    """The mistakes, then the benign variants, of one exercise."""
    return list(suite(exercise_id).mutations)


def apply(text: str, mutation: Mutation) -> str:
    """The solution's text with the mutation's edits applied, in order (``AnchorError`` if one does not fit)."""
    for i, e in enumerate(mutation.edits):
        start = 0
        if e.get("after"):
            n = text.count(e["after"])
            if n != 1:
                raise AnchorError(f"{mutation.id} edit {i + 1}: 'after' anchor {e['after']!r} occurs {n} times")
            start = text.index(e["after"]) + len(e["after"])
        end = len(text)
        if e.get("before"):  # the region ends at the first ``before`` after ``after`` (e.g. an #else)
            if e["before"] not in text[start:]:
                raise AnchorError(f"{mutation.id} edit {i + 1}: 'before' anchor {e['before']!r} not found")
            end = text.index(e["before"], start)
        n = text.count(e["find"], start, end)
        if n != 1:
            raise AnchorError(f"{mutation.id} edit {i + 1}: {e['find']!r} occurs {n} times (expected once); "
                              "the solution changed: update its planted.toml")
        at = text.index(e["find"], start)
        text = text[:at] + e["replace"] + text[at + len(e["find"]):]
    return text


def solution(exercise_id: str) -> Path:
    from tklab.grading import specs

    return ROOT / specs.get(exercise_id).solution


def base(exercise_id: str) -> str:
    """The text an exercise's mutations edit: its solution, or a debugging exercise's generated file (the program
    with the bug, as the learner gets it)."""
    from tklab.grading import specs
    from tklab.grading.exercises import stub

    spec = specs.get(exercise_id)
    return stub(spec) if spec.kind == "debug" else solution(exercise_id).read_text()


def mutated_file(mutation: Mutation, folder: Path) -> Path:
    """The mutated solution (a debugging exercise: the mutated exercise file), written as
    ``folder/<mutation name>/<the solution's file name>``."""
    src = solution(mutation.exercise)
    out = folder / mutation.name / src.name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(apply(base(mutation.exercise), mutation))
    return out


@dataclass(frozen=True)
class Verdict:
    """What ``python -m tklab check --json`` said about one file."""

    exit_code: int
    verdict: str
    summary: str
    established: str
    seconds: float
    report: dict

    @property
    def failed(self) -> bool:
        return self.exit_code == 1 and self.report.get("passed") is False

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and self.report.get("passed") is True

    def says(self, words: str) -> bool:
        """Whether the report tells the learner ``words``: in its summary or in one of its failed lines (a
        failed static check or concept floor, the compile error, the run message), since the summary may put another
        failure of the same mistake first (a run's fault before a static check's reason)."""
        r = self.report
        lines = [self.summary, str(r.get("compile_error", "")), str(r.get("run_message", ""))]
        lines += [f"{s.get('name')}: {s.get('detail')}" for s in [*r.get("static", []), *r.get("floors", [])]
                  if isinstance(s, dict) and not s.get("ok")]
        return any(words in line for line in lines)

    @property
    def caught_by_run(self) -> bool:
        """The run itself failed it (a wrong output or an error on the CPU emulator), or it never got that far (it
        did not compile, or a static check refused it): a suite's ``caught_by_run`` asks this of every mistake."""
        from tklab.grading import emulated

        r = self.report
        if not r.get("compiled") or not all(s.get("ok") for s in r.get("static", []) if isinstance(s, dict)):
            return True
        # where it ran, not ``established``: a run that errored (a deadlock, a race) established nothing
        return r.get("run_where") == emulated.LABEL and r.get("run_status") in ("wrong", "error")


def run_check(path: Path, exercise_id: str, seed: int, *, bench: bool = False, timeout: float = 300) -> Verdict:
    """The real check path, as a learner runs it: ``python -m tklab check FILE --json`` in a fresh process."""
    import time

    argv = [sys.executable, "-m", "tklab", "check", str(path), "--exercise", exercise_id, "--json",
            "--seed", str(seed)]
    if not bench:
        argv.append("--no-bench")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)
    seconds = time.perf_counter() - t0
    try:
        report = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        report = {"verdict": "no report", "summary": (out.stderr or out.stdout)[-2000:]}
    return Verdict(out.returncode, str(report.get("verdict", "")), str(report.get("summary", "")),
                   str(report.get("established", "")), seconds, report)


def run_all(jobs: Sequence[tuple[Path, str, int]], *, bench: bool = False, workers: int | None = None
            ) -> list[Verdict]:
    """``run_check`` over (path, exercise, seed) jobs, ``workers`` at a time (default: one per CPU)."""
    workers = workers or max(1, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda j: run_check(j[0], j[1], j[2], bench=bench), jobs))
