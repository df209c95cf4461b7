"""Checking a learner's exercise: ``tklab.check("ch02")`` in a notebook, ``python -m tklab check FILE``.

A check is a pipeline of five stages, each a module, none calling back into an earlier one:

1. **parse** (here): finds the exercise (an id, a unique prefix such as ``"ch02"``, or a file named after its
   exercise) and the file (by default the learner's copy in ``exercises/``), reads it (``read_source``) and
   compares it with its stub (``untouched``: nothing written in the TODOs yet is "not started");
2. **static** (``static``): refuses what must not be compiled (an ``#include`` outside the tile library, CUDA's
   headers and the learner's folder; a directive the template does not have; a Python file that does more than
   an exercise file may), compiles it (NVRTC in a child with limits, errors on the learner's own lines) and runs
   the exercise's static checks on what the compiler made of it. No GPU needed;
3. **run** (``running``): the program made ready in this process (the PTX the emulator interprets, or numba's,
   from a sandboxed child: ``program``), then run in a separate, sandboxed process with a time limit (``runner``
   → ``child``): on this GPU, else that PTX interpreted on the CPU. This process draws the inputs; outputs start
   as NaN; the edge shapes the exercise promises and its other builds (``builds``) run too; on a GPU it is timed
   against the library, a concept floor's reference solution is timed in children of its own, and the emulator's
   hazard analysis runs on a small case from chapter 02 on;
4. **judge** (``judge``): compares what came back with the reference computed here (the learner's code never
   gets to say "passed"), judges the concept floors (``spec.floors``) on what executed or on the speed, and the
   hazard run; decides PASSED, FAILED or not verified. The target speed is a goal shown beside the verdict;
5. **report** (``reporting``): the trace's "why" of a run that was too slow (or asked for), a drill's first
   wrong answer, the level-1 hint on FAILED.

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
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..run import gpu
from . import judge, reporting, running, specs, static, untouched
from .exercises import EXERCISES
from .progress import STAGE_PREFIX, listen, tell
from .route import route
from .spec_kit import Exercise
from .verdict import CheckResult

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


#: Environment variable that fixes the inputs' seed of checks run from a notebook (see ``check``).
SEED_VARIABLE = "TKLAB_CHECK_SEED"


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
    seed = _seed(seed)
    spec, file = resolve(exercise, path)
    res = CheckResult(exercise=spec.id, title=spec.title, path=_shown(file))
    source = _intake(spec, file, res)  # 1. parse: the file read (or refused), compared with its stub
    if source is None:
        res.passed = False
        return res
    res.notes += [n for n in spec.notes if n not in res.notes]  # what the exercise's author says of its verdict
    where = route(spec)  # this GPU, or the CPU emulator and why (an older GPU, no NVRTC)
    tell(f"compiling {res.path}")
    module = static.run(spec, source, res.path, res, where.static_arch, file.resolve().parent)  # 2. static
    if module is not None:
        res.arch = module.arch or res.arch
    if not res.compiled:
        res.passed = False
        return res
    have_gpu = where.on_gpu if spec.language == "cuda" else gpu.available()
    ran = running.run(spec, file, source, res.path, res, have_gpu=have_gpu, why=where.why, module=module,  # 3. run
                      wanted=run, bench=bench, timeout=timeout, seed=seed, hide=hide)
    if ran is not None:
        judge.judge_run(res, spec, ran, where.why)  # 4. judge
    elif not res.compiled:  # a numba kernel that numba could not compile to PTX
        res.passed = False
        return res
    judge.decide(res)
    reporting.report(res, spec, file, source, trace=trace, seed=seed, hide=hide)  # 5. report
    return res


def _seed(seed: int | None) -> int | None:
    """The inputs' seed: as given, else ``$TKLAB_CHECK_SEED`` where set (a notebook re-executed), else fresh."""
    if seed is None and os.environ.get(SEED_VARIABLE, "").strip():
        try:
            return int(os.environ[SEED_VARIABLE])
        except ValueError:
            raise ValueError(f"${SEED_VARIABLE} must be an integer, got {os.environ[SEED_VARIABLE]!r}") from None
    return seed


def _intake(spec: Exercise, file: Path, res: CheckResult) -> str | None:
    """The learner's text, or None with ``res.compile_error`` saying why it cannot be checked; an untouched file
    (nothing in the TODOs yet) and given code that changed are noted against its stub."""
    if not file.is_file():
        res.compile_error = f"{res.path}: no such file (run `python -m tklab exercises` to generate the exercises)"
        return None
    source, problem, notes = read_source(file)
    res.notes += notes
    if source is None:
        res.compile_error = problem
        return None
    untouched.judge(res, spec, source)
    return source


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
    listener = (lambda stage: print(f"{STAGE_PREFIX}{stage}", file=sys.stderr, flush=True)) if args.stages else None
    if args.timeout is not None and not (args.timeout > 0 and math.isfinite(args.timeout)):
        print("error: --timeout must be a positive number of seconds", file=sys.stderr)
        return EXIT_USAGE
    try:
        target, path = (args.exercise, args.target) if args.exercise else (args.target, None)
        with listen(listener):
            res = check(target, path, run=not args.no_run and None, bench=not args.no_bench,
                        timeout=args.timeout, seed=args.seed, hide=args.hide,
                        trace=True if args.trace else False if args.json else None)
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(res.to_dict(), default=str))
    else:
        print(res)
    if res.passed is True:
        return EXIT_PASSED
    if res.passed is False:
        return EXIT_FAILED
    return EXIT_PASSED if (args.allow_unverified or args.no_run) else EXIT_NOT_VERIFIED


if __name__ == "__main__":  # a process that only checks (grade and nbgrade start it so): it adopts the run's orphans
    from .sandbox import adopt_orphans

    adopt_orphans()
    raise SystemExit(main())
