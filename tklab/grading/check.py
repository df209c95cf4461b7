"""Checking a learner's exercise: ``tklab.check("ch02")`` in a notebook, ``python -m tklab check FILE``.

What a check does, in order:

1. finds the exercise (an id, a unique prefix such as ``"ch02"``, or a file named after its exercise)
   and the file (by default the learner's copy in ``exercises/``);
2. refuses what must not be compiled or run here (a CUDA ``#include`` outside the tile library, CUDA's
   headers and the learner's folder: ``tklab.toolchain.includes``; a conditional, ``#define``, ``#pragma`` or
   ``#include`` the exercise's template does not have: ``directives``; a Python file that does more than import
   numba, numpy and math, set constants and define ``@cuda.jit`` functions: ``hygiene``), then
   compiles it (CUDA: ``tklab.compile``, NVRTC in a child with limits (``bounded_compile``), so errors are
   shown on the learner's own numbered lines and a compile that blows up is stopped and named;
   numba: a syntax check) and runs the exercise's *static checks* on what the compiler made of it:
   writes its output, uses shared memory, no spills, the instruction the chapter is about shows up in
   SASS, a conflict-free layout … These need no GPU;
3. runs it in a separate, sandboxed process with a time limit (``tklab.grading.runner``, ``tklab.grading.child``,
   ``tklab.grading.sandbox``): on
   the GPU when there is one, numba exercises in the CPU simulator otherwise. This process draws the
   inputs (fresh random numbers), computes the reference and compares what the run sends back: the
   learner's code never gets to say "passed". Outputs start as NaN (an element the kernel never writes
   fails), and the edge shapes the exercise promises are tried, in each build the exercise names
   (``builds``: chapter 11 at d = 64 as well as 128);
4. times it against the library (cuBLAS, a plain copy …) in the same run, as a ratio, against the
   exercise's target. The target is a goal shown beside the verdict, not a condition of passing;
5. on a GPU, for CUDA exercises from chapter 02 on, also runs the CPU emulator's hazard analysis on one
   small case (a race the GPU's timing hid fails the check), and grades the chapter's concept floors
   (``spec.floors``: chapter 10's S_j / P·V overlap, by the emulator's count of wgmma groups in flight and
   by the speed against the reference solution, timed on the same inputs in a sandboxed child of its own
   before and after the learner's run: ``_with_reference_rounds``). The report's "evidence" row says
   which of these established the verdict.

The result is a ``CheckResult``: ``passed`` is True, False, or None when nothing could say no but
nothing could run it either (a CUDA exercise on a machine without a GPU): then the verdict is
``NOT VERIFIED`` and the report lists what was checked and what was not. ``established`` says how
correctness was established (``verdict.Evidence``: ``gpu``, ``simulator``, ``cpu-emulation`` or
``not-established``). ``python -m tklab check`` exits 0 only when the file passed, 1 when it failed,
2 on a usage error and 3 when correctness was not established (``--allow-unverified`` makes that 0,
for CI of course material on machines without a GPU).

A learner file that is not UTF-8 is read as Latin-1 (with a note), a file with a NUL byte or of more
than ``MAX_SOURCE_BYTES`` is refused with a message: ``check`` never raises for the learner's mistakes.

Public API: ``check(exercise, path=None, *, run=None, bench=True, timeout=None, seed=None, hide=())``,
``CheckResult``, ``read_source(path)``, ``main(argv)``.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..paths import REPO
from ..run import gpu
from . import specs, untouched
from .route import route
from .specs import Exercise, StaticContext, StaticResult
from .verdict import CheckResult

ROOT = REPO
EXERCISES = ROOT / "exercises"

#: A learner's exercise is a few KB; a file far larger than this was generated or is not an exercise.
MAX_SOURCE_BYTES = 512 * 1024

#: Exit codes of ``python -m tklab check``.
EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_VERIFIED = 0, 1, 2, 3


# ---- finding the exercise and the file ------------------------------------------------------------

def _looks_like_path(x: str) -> bool:
    return os.sep in x or "/" in x or Path(x).suffix in (".cu", ".py", ".cuh") or Path(x).exists()


def resolve(exercise: str | os.PathLike[str], path: str | os.PathLike[str] | None = None,
            exercises_dir: Path = EXERCISES) -> tuple[Exercise, Path]:
    """(spec, file) for an exercise id/prefix or a file path, as ``check`` reads them."""
    name = os.fspath(exercise)
    if path is None and _looks_like_path(name):
        return specs.find(Path(name).name), Path(name)
    spec = specs.find(name)
    return spec, Path(path) if path is not None else exercises_dir / spec.exercise_file


def _shown(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


# ---- the check --------------------------------------------------------------------------------------

def _static_cuda(spec: Exercise, source: str, shown: str, res: CheckResult, arch: str, own_dir: Path) -> Any:
    """Compile and run the static checks; returns the module (None when it does not compile)."""
    from ..toolchain import includes, locate
    from ..toolchain.compiler import CompileError
    from ..toolchain.compiler import compile as tk_compile
    from ..toolchain.locate import NvrtcUnavailable
    from . import directives, without_nvrtc

    res.arch = arch
    try:  # before NVRTC reads anything: it runs here, as the grader
        includes.refuse_outside(source, shown, own_dir=own_dir, allowed=[locate.tile_library_dir(),
                                *map(Path, locate.include_dirs())],
                                search=[Path.cwd(), locate.tile_library_dir(), *map(Path, locate.include_dirs())])
    except includes.IncludeRefused as e:
        res.compile_error = str(e)
        return None
    if added := directives.added(spec, source, shown):  # one preprocessor view on every path (directives.py)
        res.compile_error = "\n".join(added)
        return None
    try:
        mod = tk_compile(source, arch=arch, name=shown, options=spec.options)
    except NvrtcUnavailable as e:  # macOS: the emulator compiles it; the static checks are skipped, by name
        without_nvrtc.compile_step(spec, source, shown, res, arch, str(e))
        return None
    except CompileError as e:
        res.compile_error = str(e)
        return None
    except ValueError as e:  # e.g. a NUL byte: refused before NVRTC sees it
        res.compile_error = str(e)
        return None
    res.compiled = True
    try:
        kernel = mod[spec.kernel]
    except KeyError:
        res.static.append(StaticResult("entry kernel", False, f"no kernel named {spec.kernel} (kernels: "
                                       f"{', '.join(mod.kernels) or 'none'}); keep the name the exercise gives"))
        return mod
    res.resources = (f"{kernel.registers} registers, {kernel.shared_bytes} B static shared memory, "
                     f"{kernel.spill_bytes} B spilled")
    ctx = StaticContext(spec=spec, source=source, program=shown, arch=arch, module=mod, kernel=kernel)
    for chk in spec.static:
        res.static.append(chk.run(ctx))
    return mod


def _static_numba(spec: Exercise, source: str, shown: str, res: CheckResult) -> None:
    from . import hygiene

    try:
        ast.parse(source, shown)
    except SyntaxError as e:
        res.compile_error = f"{shown}:{e.lineno}: error: {e.msg}\n  {(e.text or '').rstrip()}"
        return
    refused = hygiene.problems(source, shown, plain_functions=spec.language == "python")
    if refused:  # nothing of it runs: the file does what an exercise file may not (tklab.grading.hygiene)
        res.compile_error = "\n".join(f"{p} (refused before running)" for p in refused)
        return
    res.compiled = True
    ctx = StaticContext(spec=spec, source=source, program=shown)
    for chk in spec.static:
        res.static.append(chk.run(ctx))
    res.notes += [r for r in (remark(source) for remark in spec.remarks) if r]


def _fill_run(res: CheckResult, outcome: Any) -> None:
    from .specs import dims_text

    res.run_status = outcome.status
    result = outcome.result or {}
    res.run_where = result.get("device") or res.run_where
    if outcome.status == "ok":
        n = len(result.get("cases", []))
        shapes = "; ".join(dims_text(c["dims"]) for c in result.get("cases", []))
        res.run_message = f"correct on {n} fresh random input{'s' if n != 1 else ''} ({shapes})"
    elif outcome.status == "wrong":
        bad = next(c for c in result["cases"] if not c["ok"])
        m = next(o for o in bad["outputs"] if not o["ok"])
        res.mismatch = {**m, "dims": bad["dims"]}
        res.run_message = f"wrong result for {dims_text(bad['dims'])}"
    else:
        res.run_message = outcome.message
    if result.get("speed"):
        res.speed = result["speed"]


def read_source(path: Path) -> tuple[str | None, str, list[str]]:
    """(text, problem, notes) of a learner's file: text None with ``problem`` set when it cannot be checked.

    UTF-8 is expected; anything else is read as Latin-1 (every byte is a character there), with a note.
    """
    shown = _shown(path)
    try:
        size = path.stat().st_size
        if size > MAX_SOURCE_BYTES:
            return None, (f"{shown} is {size / 1024:.0f} KB; an exercise file is a few KB (the limit is "
                          f"{MAX_SOURCE_BYTES // 1024} KB): is this the right file?"), []
        raw = path.read_bytes()
    except OSError as e:
        return None, f"{shown}: cannot be read ({e.strerror or e})", []
    notes = []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        text = raw.decode("latin-1")
        notes.append(f"{shown} is not UTF-8 (byte 0x{raw[e.start]:02x} on line {line}); it was read as Latin-1: "
                     "save it as UTF-8")
    if "\0" in text:
        at = text.index("\0")
        line = text.count("\n", 0, at) + 1
        return None, (f"{shown}:{line}: error: the file contains a NUL byte (a binary file, or a bad copy and "
                      "paste?); the compiler would ignore everything after it"), notes
    return text.lstrip("\ufeff"), "", notes


#: Set by ``main(--stages)``: tells a grading parent what the check is doing, so a limit can name it.
_progress: Any = None


#: Environment variable that fixes the inputs' seed of checks run from a notebook (see ``check``).
SEED_VARIABLE = "TKLAB_CHECK_SEED"


def _tell(stage: str) -> None:
    if _progress is not None:
        _progress(stage)


def _compiles_bounded(fn: Any) -> Any:
    """``fn`` with every NVRTC compile it makes run in a limited child (``bounded_compile``): the learner's file is
    compiled in the checking process's name, and a compile that takes gigabytes or minutes must stop there."""
    import functools

    @functools.wraps(fn)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        from . import bounded_compile

        with bounded_compile.bounded():
            return fn(*args, **kwargs)

    return bounded


@_compiles_bounded
def check(exercise: str | os.PathLike[str], path: str | os.PathLike[str] | None = None, *,
          run: bool | None = None, bench: bool = True, timeout: float | None = None,
          seed: int | None = None, hide: Sequence[str | os.PathLike[str]] = (),
          trace: bool | None = None) -> CheckResult:
    """Check a learner's exercise file (see the module docstring); never raises for the learner's bugs.

    ``exercise``: an id (``"ch02_smem_tiling"``), a unique prefix (``"ch02"``) or a path to a file named
    after its exercise. ``path``: the file, if not the learner's copy in ``exercises/``. ``run=False``:
    static checks only. ``bench=False``: no timing. ``timeout``: seconds for the run (default 60 in the
    simulator, 120 under CPU emulation, its compile included, 180 on a GPU with timing). ``hide``: folders
    the run's sandbox hides from the code (the solutions are always hidden). ``seed``: the random inputs'
    seed; default fresh each time, or ``$TKLAB_CHECK_SEED`` where set (``make notebooks`` sets it, so a
    re-executed chapter stores the same check output instead of new random values; grading never reads it).
    ``trace``: the report's "why" (the emulator's trace, worst lines): None for a run that was too slow, True
    also after a pass, False never (``tklab.grading.trace_report``).
    """
    if seed is None and os.environ.get(SEED_VARIABLE, "").strip():
        try:
            seed = int(os.environ[SEED_VARIABLE])
        except ValueError:
            raise ValueError(f"${SEED_VARIABLE} must be an integer, got {os.environ[SEED_VARIABLE]!r}") from None
    from .child import choose_mode

    spec, file = resolve(exercise, path)
    shown = _shown(file)
    res = CheckResult(exercise=spec.id, title=spec.title, path=shown)
    if not file.is_file():
        res.compile_error = f"{shown}: no such file (run `python -m tklab exercises` to generate the exercises)"
        res.passed = False
        return res
    source, problem, notes = read_source(file)
    res.notes += notes
    if source is None:
        res.compile_error = problem
        res.passed = False
        return res
    untouched.judge(res, spec, source)  # against its stub: nothing written in the TODOs yet, given code changed
    where = route(spec)  # this GPU, or the CPU emulator and why (an older GPU, no NVRTC)
    have_gpu = where.on_gpu if spec.language == "cuda" else gpu.available()
    _tell(f"compiling {shown}")
    module_keys: list[str] = []
    mod = None
    if spec.language == "cuda":
        mod = _static_cuda(spec, source, shown, res, where.static_arch, file.resolve().parent)
        if mod is not None:
            module_keys.append(mod.key)
    else:
        _static_numba(spec, source, shown, res)
    if not res.compiled:
        res.passed = False
        return res
    mode = choose_mode(spec, have_gpu)
    if run is False:
        res.run_message = "not asked for (run=False)"
    elif mode is None:
        res.run_message = (f"{where.why.split(', so ')[0]}, and the CPU emulator cannot run it here" if where.why
                           else "running it needs a GPU, and this machine has none; the static checks above are "
                           "all that could be checked here")
    else:
        from .builds import run_others
        from .runner import run_isolated

        emulator_parts = None
        ptx = None
        if mode.name in ("emu", "practice"):  # the emulator's own parts, and the program it runs (the PTX built here)
            from ..grading import emulated as emulated

            emulator_parts = emulated.prepare(spec)
            if mode.name == "emu" and spec.language == "numba":  # compiled by numba in a child of its own
                from . import numba_ptx

                _tell(f"compiling {shown} to PTX (numba, sandboxed)")
                ptx, problem = numba_ptx.compile_in_child(spec, file, source, hide)
                if ptx is None:
                    res.compiled, res.compile_error, res.passed = False, f"{shown}: {problem}", False
                    return res
            elif mode.name == "emu":
                ptx = emulated.ptx_for(spec, source, shown, mod)
        limit = timeout if timeout is not None else (180.0 if mode.can_bench and bench else
                                                     120.0 if mode.name in ("emu", "practice") else 60.0)
        reference_keys: list[str] = []
        reference_env = _reference(spec, res.arch, reference_keys) if mode.name == "gpu" and bench else {}
        if reference_env and seed is None:  # the reference's rounds time the same inputs as the learner's run
            seed = int.from_bytes(os.urandom(4), "little")

        def learner_run() -> Any:
            _tell(f"running {shown} ({mode.name})")
            return run_isolated(spec.id, file, mode=mode.name, timeout=limit, bench=bench and mode.can_bench,
                                seed=seed, source=source, hide=hide, cache_keys=module_keys,
                                arch=res.arch or None, emulator_parts=emulator_parts, ptx=ptx)

        if reference_env:
            outcome = _with_reference_rounds(learner_run, res, spec, reference_env, reference_keys, seed, limit,
                                             hide)
        else:
            outcome = learner_run()
        outcome = run_others(spec, outcome, file=file, source=source, shown=shown, mode=mode.name, seed=seed,
                             hide=hide, timeout=limit, arch=res.arch, emulator_parts=emulator_parts)  # builds.py
        _fill_run(res, outcome)
        if outcome.status in ("ok", "wrong"):
            res.established = outcome.evidence.value
        res.isolation = outcome.isolation
        res.notes += outcome.notes
        if mode.note:
            res.notes.append(mode.note)
        if where.why and mode.name in ("emu", "practice"):
            res.notes.append(where.why)
            res.caveat = res.caveat or "on the CPU emulator: " + where.why.split(", so ")[0]
        if mode.name == "practice":
            practice = "practice only: without NVRTC the source ran as host C++ on this machine, not the program a " \
                "GPU runs; not a graded verdict"
            res.caveat = practice + (f"; {res.caveat}" if res.caveat else "")
        if mode.name in ("emu", "practice"):
            emulated.annotate(res, outcome, spec)
            marker = "EmulationCompileError: "
            if outcome.status == "error" and marker in outcome.message and res.resources.startswith("built for"):
                # without NVRTC the sandboxed run is the file's first compile: its error is a compile error
                res.compiled, res.compile_error = False, outcome.message.split(marker, 1)[1]
        elif mode.name == "gpu" and outcome.status == "ok":
            _gpu_floors(res, spec)
            if spec.language == "cuda" and spec.chapter.isdigit() and int(spec.chapter) >= HAZARDS_FROM_CHAPTER:
                _hazards(res, spec, file, source, shown, seed, hide, mod)
    ran = res.run_status in ("ok", "wrong", "error", "crashed", "timeout")
    if not res.static_ok:
        res.passed = False
    elif ran:
        res.passed = res.run_status == "ok" and res.judged_ok
    else:
        res.passed = None
    if spec.language == "cuda" and res.static_ok:
        from ..grading import trace_report as report

        if report.wanted(res, trace):
            _tell(f"tracing {shown} on the CPU emulator")
            report.add_why(res, spec, file, source, seed=seed, hide=hide)
    if spec.language == "python":
        from . import drills

        drills.annotate(res, spec)
    _hints(res, spec, file)
    return res


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

    solution = ROOT / spec.solution
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
    from .runner import run_isolated

    solution = ROOT / spec.solution

    def reference_round(n: int) -> tuple[float | None, str]:
        _tell(f"timing the reference solution (round {n})")
        out = run_isolated(spec.id, solution, mode="reference", timeout=limit, bench=True, seed=seed,
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


def _gpu_floors(res: CheckResult, spec: Exercise) -> None:
    for floor in spec.floors:
        judged = floor.judge_gpu(res.speed or {})
        if judged is not None:
            res.floors.append(judged)


def _hazards(res: CheckResult, spec: Exercise, file: Path, source: str, shown: str, seed: int | None,
             hide: Sequence[str | os.PathLike[str]], module: Any = None) -> None:
    """The emulator's hazard analysis of a small case (and of another TMA order), beside a GPU run: a race, a
    stage released while a product still reads it, a box read before it landed … fail the check even where the
    GPU's timing hid them."""
    from ..grading import emulated as emulated
    from .runner import run_isolated
    from .specs import dims_text

    name = "hazard analysis (CPU emulator)"
    cases = emulated.hazard_cases(spec)
    if not cases:
        res.notes.append("the emulator's hazard analysis did not run here (no C++ compiler for the emulator): "
                         "the verdict rests on the GPU run alone")
        return
    _tell(f"hazard analysis of {shown} (CPU emulator)")
    parts = emulated.prepare(spec)  # the emulator's own runtime; it interprets the PTX built here for the GPU
    out = run_isolated(spec.id, file, mode="hazards", timeout=120.0, seed=seed, source=source, hide=hide,
                       emulator_parts=parts, ptx=emulated.ptx_for(spec, source, shown, module))
    where = "; ".join(dims_text(c) for c in cases)
    if out.status == "ok":
        res.hazards = StaticResult(name, True, f"no race or asynchronous hazard at {where}")
        for floor in spec.floors:
            judged = floor.judge_emulated((out.result or {}).get("facts", {}))
            if judged is not None:
                res.floors.append(judged)
    elif out.status == "wrong":
        bad = next(c for c in out.result["cases"] if not c["ok"])
        m = next(o for o in bad["outputs"] if not o["ok"])
        res.hazards = StaticResult(name, False, f"right on the GPU, but wrong at {dims_text(bad['dims'])} when the "
                                   "emulator lets "
                                   f"asynchronous copies and products finish in another order ({m.get('wrong', '?')} "
                                   f"elements of {m['output']} wrong): the code relies on timing")
    else:
        res.hazards = StaticResult(name, False, out.message)


def _hints(res: CheckResult, spec: Exercise, file: Path) -> None:
    """On FAILED: the level-1 hint in the report; a failure of the learner's own copy unlocks a level."""
    from . import hints
    from .exercises import renamed_work

    learner_copy = file.resolve() == (EXERCISES / spec.exercise_file).resolve()
    if learner_copy:
        for old, new in renamed_work(EXERCISES):
            if new == spec.exercise_file:
                res.notes.append(f"your earlier work is in exercises/{old} (the exercise is now exercises/{new}): "
                                 "`python -m tklab exercises` moves it there")
    if res.passed is False and res.compiled:
        res.hint = hints.failed_line(spec.id)
        if learner_copy and not res.not_started:  # a file not started yet is no attempt: no level unlocked
            hints.record_failure(spec.id)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tklab check FILE|ID``: exit 0 passed, 1 failed, 2 usage error, 3 correctness not established."""
    ap = argparse.ArgumentParser(prog="python -m tklab check", description="Check an exercise file.",
                                 epilog="exit status: 0 passed; 1 failed; 2 usage error; 3 not verified: the static "
                                 "checks pass but nothing could run the kernel here (no GPU), so its correctness "
                                 "is not established (--allow-unverified or --no-run: 0)")
    ap.add_argument("target", help="exercise file (named after its exercise) or exercise id / prefix")
    ap.add_argument("--exercise", help="the exercise id, when the file name does not say it")
    ap.add_argument("--no-run", action="store_true", help="static checks only (exit 0 when they pass)")
    ap.add_argument("--allow-unverified", action="store_true",
                    help="exit 0 when the static checks pass but correctness could not be established here "
                    "(for CI of course material on machines without a GPU)")
    ap.add_argument("--no-bench", action="store_true", help="do not time against the library")
    ap.add_argument("--timeout", type=float, default=None, help="seconds allowed for the run")
    ap.add_argument("--seed", type=int, default=None, help="seed for the random inputs (default: fresh)")
    ap.add_argument("--hide", action="append", default=[], help="a folder the run may not see (repeatable)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--trace", action="store_true",
                    help="add the emulator's trace of your kernel: its worst lines (bank conflicts, sectors, waits)")
    ap.add_argument("--stages", action="store_true", help=argparse.SUPPRESS)  # for grade: progress on stderr
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    global _progress
    if args.stages:
        _progress = lambda stage: print(f"{STAGE_PREFIX}{stage}", file=sys.stderr, flush=True)  # noqa: E731
    if args.timeout is not None and not (args.timeout > 0 and math.isfinite(args.timeout)):
        print("error: --timeout must be a positive number of seconds", file=sys.stderr)
        return EXIT_USAGE
    try:
        target, path = (args.exercise, args.target) if args.exercise else (args.target, None)
        res = check(target, path, run=not args.no_run and None, bench=not args.no_bench,
                    timeout=args.timeout, seed=args.seed, hide=args.hide,
                    trace=True if args.trace else False if args.json else None)
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        _progress = None
    if args.json:
        print(json.dumps(res.to_dict(), default=str))
    else:
        print(res)
    if res.passed is True:
        return EXIT_PASSED
    if res.passed is False:
        return EXIT_FAILED
    return EXIT_PASSED if (args.allow_unverified or args.no_run) else EXIT_NOT_VERIFIED


#: Prefix of the progress lines ``--stages`` prints on stderr.
STAGE_PREFIX = "@@tklab-check-stage "


if __name__ == "__main__":  # a process that only checks (grade and nbgrade start it so): it adopts the run's orphans
    from .sandbox import adopt_orphans

    adopt_orphans()
    raise SystemExit(main())
