"""The check's run stage: the program made ready (``program``), then run in sandboxed children (``runner``).

The mode is the first that can run the exercise here (``modes.choose_mode``): this GPU, else the PTX the compiler
built, interpreted on the CPU. A numba exercise's PTX comes from numba's NVVM in a child of its own first. On a GPU
a concept floor that compares with the reference solution times it in children of its own, a round before and a
round after the learner's run (``_with_reference_rounds``); then the exercise's other builds run (``builds``); and
beside a right GPU run, the emulator's hazard analysis of a small case (``HAZARDS_FROM_CHAPTER``). What the runs
mean is the judge's (``judge.fill_run`` ...): this stage only runs them.

Public API: ``Ran``, ``run(spec, file, source, shown, res, where, module, *, ...) -> Ran | None``,
``numba_ptx_in_child(spec, file, source, hide)``, ``HAZARDS_FROM_CHAPTER``, ``REFERENCE_SPREAD``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..paths import REPO
from . import cases, program, runner
from .builds import run_others
from .judge import RunOutcome
from .modes import Mode, choose_mode
from .progress import tell
from .spec_kit import Exercise
from .verdict import CheckResult


@dataclass
class Ran:
    """What the run stage ran: the mode, the learner's outcome (other builds included), and beside a GPU run the
    emulator's hazard run and the cases it covered (None where it did not run)."""

    mode: Mode
    outcome: RunOutcome
    hazards: RunOutcome | None = None
    hazard_cases: list[dict[str, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # about what could not run here


def run(spec: Exercise, file: Path, source: str, shown: str, res: CheckResult, *, have_gpu: bool, why: str,
        module: Any, wanted: bool | None, bench: bool, timeout: float | None, seed: int | None,
        hide: Sequence[str | os.PathLike[str]]) -> Ran | None:
    """Run the learner's file (see the module docstring); None when nothing ran (``res.run_message`` says why)."""
    mode = choose_mode(spec, have_gpu)
    if wanted is False:
        res.run_message = "not asked for (run=False)"
        return None
    if mode is None:
        res.run_message = (f"{why.split(', so ')[0]}, and the CPU emulator cannot run it here" if why
                           else "running it needs a GPU, and this machine has none; the static checks above are "
                           "all that could be checked here")
        return None
    parts, ptx = None, None
    if mode.name in ("emu", "practice"):  # the emulator's own parts, and the program it runs (the PTX built here)
        parts = program.prepare(spec)
        if mode.name == "emu" and spec.language == "numba":  # compiled by numba in a child of its own
            tell(f"compiling {shown} to PTX (numba, sandboxed)")
            ptx, problem = numba_ptx_in_child(spec, file, source, hide)
            if ptx is None:
                res.compiled, res.compile_error = False, f"{shown}: {problem}"
                return None
        elif mode.name == "emu":
            ptx = program.ptx_for(spec, source, shown, module)
    limit = timeout if timeout is not None else (180.0 if mode.can_bench and bench else
                                                 120.0 if mode.name in ("emu", "practice") else 60.0)
    keys = [module.key] if module is not None else []
    reference_keys: list[str] = []
    reference_env = _reference(spec, res.arch, reference_keys) if mode.name == "gpu" and bench else {}
    if reference_env and seed is None:  # the reference's rounds time the same inputs as the learner's run
        seed = int.from_bytes(os.urandom(4), "little")

    def learner_run() -> RunOutcome:
        tell(f"running {shown} ({mode.name})")
        return runner.run_isolated(spec.id, file, mode=mode.name, timeout=limit, bench=bench and mode.can_bench,
                            seed=seed, source=source, hide=hide, cache_keys=keys, arch=res.arch or None,
                            emulator_parts=parts, ptx=ptx)

    if reference_env:
        outcome = _with_reference_rounds(learner_run, res, spec, reference_env, reference_keys, seed, limit, hide)
    else:
        outcome = learner_run()
    outcome = run_others(spec, outcome, file=file, source=source, shown=shown, mode=mode.name, seed=seed,
                         hide=hide, timeout=limit, arch=res.arch, emulator_parts=parts)
    ran = Ran(mode, outcome)
    if mode.name == "gpu" and outcome.status == "ok" and spec.language == "cuda" and spec.chapter.isdigit() and \
            int(spec.chapter) >= HAZARDS_FROM_CHAPTER:
        ran.hazard_cases = cases.hazard_cases(spec)
        if ran.hazard_cases:
            tell(f"hazard analysis of {shown} (CPU emulator)")
            ran.hazards = runner.run_isolated(spec.id, file, mode="hazards", timeout=120.0, seed=seed, source=source,
                                       hide=hide, emulator_parts=program.prepare(spec),
                                       ptx=program.ptx_for(spec, source, shown, module))
        else:
            ran.notes.append("the emulator's hazard analysis did not run here (no C++ compiler for the emulator): "
                             "the verdict rests on the GPU run alone")
    return ran


def numba_ptx_in_child(spec: Exercise, file: Path, source: str,
                       hide: Sequence[str | os.PathLike[str]] = ()) -> tuple[str | None, str]:
    """The learner's numba kernel as PTX, compiled by numba's NVVM in a sandboxed child of its own (mode
    "numba-ptx": it imports the learner's file), or (None, why not)."""
    out = runner.run_isolated(spec.id, file, mode="numba-ptx", timeout=180.0, source=source, hide=hide)
    raw = (out.result or {}).get("ptx")
    if out.status == "ok" and isinstance(raw, bytes) and raw.strip():
        return raw.decode("utf-8", "replace"), ""
    return None, out.message or out.status


#: From this chapter on, a GPU check also runs the emulator's hazard analysis on one small case: a race can
#: pass on a GPU by luck, from chapter 02's missing __syncthreads to the asynchronous chapters' stage refilled
#: while a wgmma group reads it (the planted-mistake suites of chapters 02-04 plant such barriers).
HAZARDS_FROM_CHAPTER = 2


def _reference(spec: Exercise, arch: str, module_keys: list[str]) -> dict[str, str]:
    """Where a concept floor compares with the reference solution's time: compile the solution here (the
    sandbox hides it); its cache key goes into ``module_keys``, for the reference's own child (never the
    learner's). Returns that child's extra environment."""
    if not any(getattr(f, "needs_reference", False) for f in spec.floors):
        return {}
    from ..toolchain.compiler import compile as tk_compile
    from .child import REFERENCE_VARIABLE

    solution = REPO / spec.solution
    if not solution.is_file():  # a course copy without solutions/: the floor is judged without the ratio
        return {}
    mod = tk_compile(solution.read_text(), arch=arch, name=solution.name, options=spec.options)
    module_keys.append(mod.key)
    return {REFERENCE_VARIABLE: mod.key}


#: Reference timings of one check further apart than this (relative) make its ratio uncertain: said in a note.
REFERENCE_SPREAD = 0.10


def _with_reference_rounds(learner_run: Any, res: CheckResult, spec: Exercise, env: dict[str, str],
                           keys: list[str], seed: int | None, limit: float,
                           hide: Sequence[str | os.PathLike[str]]) -> Any:
    """The learner's run between two rounds of the reference solution's timing, each in a child of its own.

    Why not in the learner's child: that child runs the learner's code, which could then read, time or
    slow down the reference (its module would be in the child's cache). Here the reference's child has
    nothing of the learner's (no file, no module, separate process tree), the learner's child has nothing
    of the reference's, and the ratio is computed in this process from the times both sent back. The same
    seed gives both the same benchmark inputs; a round before and a round after the learner's run (same GPU,
    minutes apart at most) average out a clock or temperature drift across the three processes. The second
    round runs only when the learner's run was timed. Returns the learner's ``RunOutcome``, its speed entry
    completed with ``reference_ms``, ``reference_rounds_ms`` and ``reference_ratio``."""
    solution = REPO / spec.solution

    def reference_round(n: int) -> tuple[float | None, str]:
        tell(f"timing the reference solution (round {n})")
        out = runner.run_isolated(spec.id, solution, mode="reference", timeout=limit, bench=True, seed=seed,
                           source="// the reference solution: its module comes from the compile cache\n",
                           hide=hide, cache_keys=keys, arch=res.arch or None, env=env)
        speed = (out.result or {}).get("speed") or {}
        if out.status == "ok" and speed.get("ms"):
            return float(speed["ms"]), ""
        return None, str(speed.get("error") or out.message or out.status)[:300]

    rounds: list[float] = []
    problems: list[str] = []
    ms, why = reference_round(1)
    rounds += [ms] if ms is not None else []
    problems += [why] if why else []
    outcome = learner_run()
    speed = (outcome.result or {}).get("speed") or {}
    if outcome.status != "ok" or not speed.get("ms") or speed.get("error"):
        return outcome
    ms, why = reference_round(2)
    rounds += [ms] if ms is not None else []
    problems += [why] if why else []
    if not rounds:
        res.notes.append(f"the reference solution could not be timed ({problems[0]}): the "
                         "concept floors that compare with it were not judged on speed")
        return outcome
    reference_ms = sum(rounds) / len(rounds)
    speed.update(reference_ms=reference_ms, reference_rounds_ms=rounds, reference_ratio=reference_ms / speed["ms"])
    if len(rounds) > 1 and (max(rounds) - min(rounds)) > REFERENCE_SPREAD * min(rounds):
        res.notes.append("the reference solution's two timings differ by more than "
                         f"{REFERENCE_SPREAD:.0%} ({', '.join(f'{r:.3f}' for r in rounds)} ms): the GPU was busy "
                         "or changing clocks, so its ratio is uncertain; check again")
    elif problems:
        res.notes.append(f"one round of the reference solution's timing failed ({problems[0]}); the ratio "
                         "rests on the other")
    return outcome
