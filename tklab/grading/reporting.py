"""The check's report stage, after the verdict: what helps the learner read it. The "why" of a run that was too
slow (or asked for): the emulator's trace of the kernel, its worst lines (``trace_report``); a drill's first wrong
answer with its arguments (``drills``); on FAILED the level-1 hint, and a failed check of the learner's own copy
unlocks the next level (``hints``). Nothing here changes the verdict.

Public API: ``report(res, spec, file, source, *, trace, seed, hide)``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .progress import tell
from .spec_kit import Exercise
from .verdict import CheckResult


def report(res: CheckResult, spec: Exercise, file: Path, source: str, *, trace: bool | None, seed: int | None,
           hide: Sequence[str | os.PathLike[str]]) -> None:
    """Add the why, a drill's first wrong answer, and the hint (see the module docstring)."""
    if spec.language == "cuda" and res.static_ok:
        from . import trace_report

        if trace_report.wanted(res, trace):
            tell(f"tracing {res.path} on the CPU emulator")
            trace_report.add_why(res, spec, file, source, seed=seed, hide=hide)
    if spec.language == "python":
        from . import drills

        drills.annotate(res, spec)
    _hints(res, spec, file)


def _hints(res: CheckResult, spec: Exercise, file: Path) -> None:
    """On FAILED: the level-1 hint in the report; a failure of the learner's own copy unlocks a level."""
    from . import hints
    from .exercises import EXERCISES, renamed_work

    learner_copy = file.resolve() == (EXERCISES / spec.exercise_file).resolve()
    if learner_copy:
        for old, new in renamed_work(EXERCISES):
            if new == spec.exercise_file:
                res.notes.append(f"your earlier work is in exercises/{old} (the exercise is now exercises/{new}): "
                                 "`python -m tklab exercises` moves it there")
    if res.passed is False and res.compiled:
        res.hint = hints.failed_line(spec.id)
        if learner_copy and not res.not_started:  # a file not started yet is no attempt: no level unlocked
            hints.record_failure(spec.id, verdict=hints.verdict_keys(res))
