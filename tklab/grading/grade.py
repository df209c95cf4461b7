"""Instructor mode: ``python -m tklab grade --class DIR [--out grades.csv]``.

DIR holds one folder per student; in it (at any depth) the student's exercise files, named as in
``exercises/`` (``ch02_smem_tiling.cu`` …). Every file is checked exactly as a learner's ``python -m
tklab check`` would, each check in its own process with a wall-clock limit for its whole process tree,
so one student's crashing compile, faulting kernel or endless loop costs that student's row and nothing
more. Learners' code runs in ``tklab.grading.sandbox`` (the report names the level) and cannot see the class
folder; verdicts are reached by the checker, never by the learner's code.

The CSV has one row per (student, exercise): ``student, exercise, compiled, correct, speed_ratio,
message, established, isolation`` with ``compiled`` yes/no, ``correct`` yes / no / not verified (the
static checks pass but nothing could run the kernel here: no GPU) / missing / refused, ``speed_ratio`` =
library time / student's time when it was measured, ``established`` how the output was judged
(``gpu``, ``simulator``; ``not-established`` when it was not), ``isolation`` the sandbox level of the
run, ``hint_level`` (``unknown``: see below), ``device`` (the GPU a speed was measured on) and ``submitted`` (the
file's modification time in the class folder, UTC; the challenges' leaderboard, ``python -m tklab leaderboard``,
breaks equal ratios by it).

What grade refuses, and says so in the row: a student folder that is a link (of any kind: to a classmate's
folder or out of the class), and an exercise file that is a link (a link to ``solutions/`` is not the student's
work), a FIFO, a device or more than ``intake.MAX_FILE_BYTES``. The class folder is hostile input: the grader
never reads it itself. A child with limits lists it and each student's folder (``tklab.grading.intake``: no
link followed, a wall-clock limit per student), another copies a student's files into a folder the grader owns,
and the checker checks that copy. Refused before anything is graded: student folders whose names read as one
(``sheet.refuse_lookalikes``). Names are written escaped and reversibly, never as a formula
(``sheet.escape_name``); message cells that a spreadsheet would run get a leading ``'``. The ``hint_level``
column is ``unknown``: the hint state lives in the student's folder, which the student writes, so it is not a
grade input.

Nothing is lost: ``--out`` is checked and locked before anything is graded (a second grader on it is
refused, naming the holder), rows are written as they finish, and a rerun with the same ``--out`` resumes
(rows already there are kept; ``--restart`` grades everyone again, keeping the old sheet as
``<name>.bak-<time>``). Ctrl-C stops the check in flight and its sandboxed run, keeps the sheet and exits
130; the rerun grades only what is missing (``tklab.grading.sheet`` says what a sheet guarantees).

A large class is graded in parallel with ``--shard I/N`` (one shard per GPU node: a Slurm job array, a
Kubernetes indexed Job) and ``python -m tklab grade-merge`` (``tklab.grading.grade_shards``). ``--seed N`` gives
every check the same random inputs (a regrade on the inputs of an earlier one); by default each check
draws fresh ones.

Public API: ``grade(class_dir, ...) -> list[Row]``, ``plan(class_dir, exercises)``, ``Row``,
``scan(student_dir, ids)``, ``find_submissions``, ``students(class_dir)``, ``Sheet``, ``summary(rows)``,
``main(argv)``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path

from ..paths import REPO
from . import grade_shards, intake, specs
from .sheet import FIELDS, GradeError, Row, Sheet, escape_name, refuse_lookalikes

__all__ = ["FIELDS", "GradeError", "Row", "Sheet", "find_submissions", "grade", "main", "plan", "scan", "students",
           "summary"]

_PACKAGE_PARENT = REPO
#: Seconds a check may spend before its run (compiling, static checks), on top of the run's own limit.
COMPILE_ALLOWANCE = 240.0
#: Seconds an interrupted checker gets to stop its own run before its whole tree is killed.
STOP_GRACE = 3.0


# ---- finding the work -------------------------------------------------------------------------------

def _filenames(exercise_ids: Sequence[str]) -> dict[str, str]:
    """{file name: exercise id}: what a student's file must be called to count."""
    return {specs.get(ex).filename: ex for ex in exercise_ids}


def _by_exercise(folder: intake.Folder, exercise_ids: Sequence[str], shown: str
                 ) -> tuple[dict[str, str], dict[str, str]]:
    """({exercise id: path relative to the student's folder}, {exercise id: why refused or missing}) of one
    surveyed folder: links in it are named when an exercise is missing (they were not followed)."""
    names = _filenames(exercise_ids)
    found = {names[n]: rel for n, rel in folder.found.items() if n in names}
    refused = {names[n]: why for n, why in folder.refused.items() if n in names}
    links = [n.removesuffix(" (a link)") for n in folder.notes if n.endswith(" (a link)")]
    for ex in exercise_ids:
        if ex not in found and ex not in refused and links:
            refused[ex] = (f"no {specs.get(ex).filename} in {shown}/ (not followed: links in it: "
                           f"{', '.join(links[:5])})")
    return found, refused


def students(class_dir: Path) -> tuple[list[Path], dict[str, str]]:
    """(student folders, {name: why refused}) of a class folder, read by ``intake``; hidden entries are skipped,
    and a student folder that is a link is refused."""
    seen = intake.survey(class_dir, [])
    return [Path(class_dir) / name for name in sorted(seen.folders)], seen.refused


def scan(student_dir: Path, exercise_ids: Sequence[str]) -> tuple[dict[str, Path], dict[str, str]]:
    """({exercise id: file}, {exercise id: why refused}) for a student's folder, read by ``intake``.

    A file counts when it is named after an exercise (backups ``name.bak-*`` do not) and is a regular file of
    the student's own: a link (to ``solutions/``, to another student, or within the folder), a FIFO or a device
    is refused. Of several copies, the shallowest wins. The paths returned are for messages: the grader reads
    only ``intake.fetch``'s copies.
    """
    student_dir = Path(student_dir)
    seen = intake.survey(student_dir.parent, list(_filenames(exercise_ids)), students=[student_dir.name])
    if student_dir.name in seen.refused:
        return {}, {ex: seen.refused[student_dir.name] for ex in exercise_ids}
    found, refused = _by_exercise(seen.folders[student_dir.name], exercise_ids, student_dir.name)
    return {ex: student_dir.joinpath(*rel.split("/")) for ex, rel in found.items()}, refused


def find_submissions(student_dir: Path, exercise_ids: Sequence[str]) -> dict[str, Path]:
    """{exercise id: file} for the files in a student's folder named after an exercise (see ``scan``)."""
    return scan(student_dir, exercise_ids)[0]


# ---- checking one file ------------------------------------------------------------------------------

def _checker_command(exercise: str, path: Path, *, timeout: float, run: bool, bench: bool,
                     hide: Sequence[Path], seed: int | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "tklab.grading.check", "--json", "--stages", "--exercise", exercise, str(path),
           "--timeout", str(timeout)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    for h in hide:
        cmd += ["--hide", str(h)]
    if not run:
        cmd.append("--no-run")
    if not bench:
        cmd.append("--no-bench")
    return cmd


def _check_in_subprocess(exercise: str, path: Path, *, timeout: float, run: bool, bench: bool,
                         hide: Sequence[Path] = (), compile_allowance: float = COMPILE_ALLOWANCE,
                         seed: int | None = None, cwd: Path | None = None) -> dict:
    """``python -m tklab.grading.check --json`` on one file, its whole process tree limited to ``timeout`` plus the
    compile allowance; a crash or a hang of the checker becomes a dict that says what it was doing. ``cwd``: the
    checker's folder (messages show the file's path from there; default: this process's)."""
    from .check import SEED_VARIABLE, STAGE_PREFIX
    from .sandbox import Limits, Sandbox

    cmd = _checker_command(exercise, path, timeout=timeout, run=run, bench=bench, hide=hide, seed=seed)
    env = dict(os.environ)
    env.pop(SEED_VARIABLE, None)  # a notebook's fixed seed never reaches grading: --seed is the only way
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_PARENT), env.get("PYTHONPATH")) if p)
    limit = timeout + compile_allowance
    out = bytearray()
    box = Sandbox(Path(cwd) if cwd is not None else Path.cwd(), limits=Limits(wall_seconds=limit), confine=False)
    box.start(cmd, env)
    assert box.proc is not None and box.proc.stdout is not None
    try:
        fin = box.supervise({box.proc.stdout.fileno(): out.extend}, grace=2.0)
    except BaseException:  # Ctrl-C (or any error) here: the check in flight and what it started stop too
        _stop(box)
        raise
    lines = out.decode("utf-8", "replace").splitlines()
    stages = [ln[len(STAGE_PREFIX):] for ln in lines if ln.startswith(STAGE_PREFIX)]
    stage = stages[-1] if stages else "starting"
    if fin.timed_out:
        why = (" (a compile this slow: a huge generated source, or deep template recursion / unrolling)"
               if stage.startswith("compiling") else "")
        return {"compiled": None, "passed": False,
                "summary": f"the check did not finish within {limit:g} s, while {stage}{why}; it was stopped"}
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    tail = next((ln for ln in reversed(lines) if ln.strip() and not ln.startswith(STAGE_PREFIX)), "no output")
    return {"compiled": None, "passed": False,
            "summary": f"the checker crashed (exit {fin.returncode}) while {stage}: {tail}"}


def _stop(box: object) -> None:
    """Stop a checker in flight: SIGINT first, so it stops its own sandboxed run the way it does on any
    interruption, then (after a moment) every process of its tree."""
    proc = getattr(box, "proc", None)
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGINT)
        with contextlib.suppress(Exception):
            proc.wait(timeout=STOP_GRACE)
    box.kill()  # type: ignore[attr-defined]


#: The ``hint_level`` cell of a graded row: the grader has no record of the hints a student saw (their hint state
#: lives in their own folder, which they write), so it is not read, and not a grade input.
HINT_LEVEL_UNKNOWN = "unknown"


def _row(student: str, exercise: str, d: dict, submitted: str = "") -> Row:
    compiled = {True: "yes", False: "no", None: "?"}[d.get("compiled")]
    correct = {True: "yes", False: "no", None: "not verified"}[d.get("passed")]
    ratio = d.get("speed_ratio")
    level = str(d.get("isolation", "")).split(" (", 1)[0].split(",", 1)[0]
    device = (d.get("speed") or {}).get("device") or (d.get("run_where", "") if d.get("established") == "gpu" else "")
    return Row(student, exercise, compiled, correct, f"{ratio:.3f}" if isinstance(ratio, (int, float)) else "",
               " ".join(str(d.get("summary", "")).split()), str(d.get("established", "")), level,
               HINT_LEVEL_UNKNOWN, " ".join(str(device).split()), submitted)


def _submitted(copy: Path) -> str:
    """When a file was submitted: the modification time ``intake.fetch`` kept on the grader's own copy (UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(copy.stat().st_mtime))


# ---- grading -------------------------------------------------------------------------------------------

def _survey(class_dir: Path, exercises: Sequence[str] | None
            ) -> tuple[list[str], list[str], dict[str, tuple[dict[str, str], dict[str, str]]], dict[str, str]]:
    """(roster, exercise ids, {student: ({exercise: path relative to their folder}, {exercise: why refused})},
    {student: why refused}) of a whole class folder, read by one ``intake`` child; ``GradeError`` when two
    folders' names read as one (``sheet.refuse_lookalikes``)."""
    if not class_dir.is_dir():
        raise FileNotFoundError(f"{class_dir} is not a folder (expected one folder per student)")
    ids = list(exercises) if exercises else specs.all_ids()
    try:
        seen = intake.survey(class_dir, list(_filenames(ids)))
    except intake.IntakeError as e:
        raise GradeError(str(e)) from None
    refuse_lookalikes(seen.roster)
    found = {name: _by_exercise(folder, ids, name) for name, folder in seen.folders.items()}
    if not exercises:
        ids = [ex for ex in ids if any(ex in f or ex in r for f, r in found.values())]
    return seen.roster, ids, found, seen.refused


def plan(class_dir: str | Path, exercises: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """(every student's name in grading order, the exercise ids a sheet has columns for) of a class folder.

    The exercise set is a property of the whole class (exercises nobody submitted are left out unless
    named), so a shard that grades a few students still writes the same rows for them as a single run.
    """
    roster, ids, _, _ = _survey(Path(class_dir), exercises)
    return roster, ids


def grade(class_dir: str | Path, *, exercises: Sequence[str] | None = None, timeout: float = 60.0,
          run: bool = True, bench: bool = True, progress: bool = True, skip: Iterable[tuple[str, str]] = (),
          on_row: Callable[[Row], None] | None = None,
          compile_allowance: float = COMPILE_ALLOWANCE, only: Collection[str] | None = None,
          seed: int | None = None) -> list[Row]:
    """Check every student's files; exercises nobody submitted are left out unless named in ``exercises``.

    ``skip``: (student, exercise) pairs already graded (a resumed sheet). ``on_row`` is called with each
    row as soon as it is graded. ``only``: grade just these students (a shard, ``tklab.grading.grade_shards``);
    the exercise set is still that of the whole class. ``seed``: the checks' random inputs (default fresh).
    """
    class_dir = Path(class_dir)
    names, ids, found, refused_students = _survey(class_dir, exercises)
    if only is not None:
        names = [n for n in names if n in only]
    done = set(skip)
    rows: list[Row] = []

    def emit(row: Row) -> None:
        rows.append(row)
        if on_row is not None:
            on_row(row)

    for name in names:
        todo = [ex for ex in ids if (name, ex) not in done]  # a resumed sheet (its names unescaped: the folders' own)
        if not todo:
            continue
        if name in refused_students:
            for ex in todo:
                emit(Row(name, ex, "", "refused", "", refused_students[name]))
            continue
        files, refused = found[name]
        with _copied(class_dir, name, {ex: files[ex] for ex in todo if ex in files}) as (staged, copies, problems):
            for ex in todo:
                path = copies.get(ex)
                why = refused.get(ex) or problems.get(ex)
                if path is None:
                    if why:
                        emit(Row(name, ex, "", "refused" if why.startswith("refused") else "missing", "", why))
                    else:
                        emit(Row(name, ex, "", "missing", "", f"no {specs.get(ex).filename} in {escape_name(name)}/"))
                    continue
                if progress:
                    print(f"  {name!r}: {ex} …", file=sys.stderr, flush=True)
                d = _check_in_subprocess(ex, path, timeout=timeout, run=run, bench=bench, hide=[class_dir, staged],
                                         compile_allowance=compile_allowance, seed=seed, cwd=staged)
                emit(_row(name, ex, d, _submitted(path)))
    return rows


@contextlib.contextmanager
def _copied(class_dir: Path, student: str, files: dict[str, str]
            ) -> Iterator[tuple[Path, dict[str, Path], dict[str, str]]]:
    """A fresh folder the grader owns with copies of ``files`` ({exercise: path in the student's folder}) made by
    ``intake.fetch``: (the folder, {exercise: the copy}, {exercise: why refused}); removed afterwards. The copy
    sits at ``<folder>/<student>/<path>``, so the checker, run in the folder, names it as the student's."""
    staged = Path(tempfile.mkdtemp(prefix="tklab-intake-"))
    try:
        by_name = {specs.get(ex).filename: ex for ex in files}
        copies, problems = intake.fetch(class_dir, student, {specs.get(ex).filename: rel for ex, rel in files.items()},
                                        staged / student)
        yield staged, {by_name[n]: p for n, p in copies.items()}, {by_name[n]: why for n, why in problems.items()}
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def summary(rows: Sequence[Row]) -> str:
    """Per exercise: how many submitted, compiled, passed, not verified, and the median speed ratio."""
    lines = [f"{'exercise':<26}{'submitted':>10}{'compiled':>10}{'correct':>9}{'unverified':>11}"
             f"{'median speed':>14}"]
    for ex in dict.fromkeys(r.exercise for r in rows):
        rs = [r for r in rows if r.exercise == ex and r.correct not in ("missing", "refused")]
        ratios = [float(r.speed_ratio) for r in rs if r.speed_ratio]
        med = f"{statistics.median(ratios):.2f}×" if ratios else "–"
        lines.append(f"{ex:<26}{len(rs):>10}{sum(r.compiled == 'yes' for r in rs):>10}"
                     f"{sum(r.correct == 'yes' for r in rs):>9}{sum(r.correct == 'not verified' for r in rs):>11}"
                     f"{med:>14}")
    names = list(dict.fromkeys(r.student for r in rows))
    per = ", ".join(f"{s!r} {sum(r.correct == 'yes' for r in rows if r.student == s)}" for s in names)
    lines.append(f"correct per student: {per}")
    unverified = sum(r.correct == "not verified" for r in rows)
    if unverified:
        lines.append(f"{unverified} file(s) passed their static checks but could not be run here (no GPU): their "
                     "correctness is NOT established ('not verified'); grade on a GPU machine for verdicts")
    refused = sum(r.correct == "refused" for r in rows)
    if refused:
        lines.append(f"{refused} row(s) refused: links, files that are not regular files, or folders that could not "
                     "be read in time (see their message)")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tklab grade", description="Grade a class folder.")
    ap.add_argument("--class", dest="class_dir", required=True, type=Path, help="one folder per student")
    ap.add_argument("--out", type=Path, default=None, help="CSV file to write, row by row; an existing sheet is "
                    "resumed (default: print it)")
    ap.add_argument("--restart", action="store_true", help="grade everyone again (the old --out is kept as "
                    "<name>.bak-<time>)")
    ap.add_argument("--exercises", nargs="*", default=None, help="exercise ids or prefixes (default: all "
                    "that anyone submitted)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per run (each file)")
    ap.add_argument("--compile-timeout", type=float, default=COMPILE_ALLOWANCE,
                    help="seconds a check may spend before its run (compiling, static checks)")
    ap.add_argument("--no-run", action="store_true", help="static checks only")
    ap.add_argument("--no-bench", action="store_true", help="do not time against the library")
    ap.add_argument("--seed", type=int, default=None, help="seed of every check's random inputs (default: fresh "
                    "ones for each check); the same seed regrades a file on the same inputs")
    ap.add_argument("--allow-unsandboxed", action="store_true",
                    help="grade even where learner code could reach the grader (no bubblewrap, or root with no user to "
                         "drop to): the sheet's isolation column then says so; for a trusted class or a test only")
    ap.add_argument("--shard", metavar="I/N", default=None, help="grade only shard I of N (0 <= I < N) of the class, "
                    "for a job array; needs --out; `python -m tklab grade-merge` joins the shards' sheets")
    return ap


def _refusals(args: argparse.Namespace) -> tuple[list[str] | None, tuple[int, int] | None]:
    """(the exercise ids asked for, the shard) once the arguments and this machine can grade (``GradeError``
    naming what cannot: bad limits, no class folder, a shard without --out, no sandbox, practice-only runs)."""
    if not (args.timeout > 0 and args.compile_timeout > 0):
        raise GradeError("--timeout and --compile-timeout must be positive numbers of seconds")
    ids = [specs.find(e).id for e in args.exercises] if args.exercises else None
    if not args.class_dir.is_dir():
        raise GradeError(f"{args.class_dir} is not a folder (expected one folder per student)")
    shard = None
    if args.shard is not None:
        shard = grade_shards.parse_shard(args.shard)
        if args.out is None:
            raise GradeError("--shard needs --out: each shard writes its own sheet, and `python -m tklab "
                             "grade-merge` joins them")
    if not args.no_run:
        from .route import practice_only
        from .sandbox import refusal

        refused = refusal(args.allow_unsandboxed)
        if refused:
            raise GradeError(f"{refused} (the sheet's isolation column records how little held)")
        practice = practice_only([specs.get(i) for i in (ids or specs.all_ids())])
        if practice:
            raise GradeError(practice)
    return ids, shard


def _say_what_is_kept(sheet: Sheet, roster: Sequence[str], out: Path | None) -> None:
    if sheet.backup:
        print(f"kept the previous sheet as {sheet.backup}", file=sys.stderr)
    elif sheet.done:
        print(f"resuming {out}: {len(sheet.done)} row(s) already graded are kept (--restart grades "
              "everyone again)", file=sys.stderr)
        gone = sorted({r.student for r in sheet.done} - set(roster))
        if gone:
            print(f"  kept rows of {len(gone)} student(s) with no folder in the class now: "
                  f"{', '.join(repr(escape_name(n)) for n in gone[:10])}", file=sys.stderr)


def _interrupted(out: Path | None, written: Sequence[Row], sheet: Sheet | None) -> int:
    if out is None:
        print(f"\ninterrupted: {len(written)} row(s) were printed; the check in flight was stopped", file=sys.stderr)
    else:
        kept = len(sheet.done) if sheet is not None else 0
        print(f"\ninterrupted: {out} keeps every row finished ({len(written)} from this run, {kept} from "
              "before); the check in flight was stopped and is not in it. Run the same command again to "
              "resume: only what is missing is graded", file=sys.stderr)
    return 130


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tklab grade --class DIR [--out grades.csv]``; exit 0 once every file was graded."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    manifest = sheet = None
    written: list[Row] = []
    try:
        ids, shard = _refusals(args)
        roster, every = plan(args.class_dir, ids)  # refuses names that read as one before anything is opened
        sheet = Sheet(args.out, restart=args.restart)  # locked from here until it is closed
        for note in sheet.notes:
            print(note, file=sys.stderr)
        only = None
        if shard is not None and args.out is not None:
            options = {"timeout": args.timeout, "compile_timeout": args.compile_timeout, "run": not args.no_run,
                       "bench": not args.no_bench, "seed": args.seed}
            manifest = grade_shards.begin(args.out, index=shard[0], count=shard[1], roster=roster, exercises=every,
                                          options=options, class_dir=args.class_dir, resuming=bool(sheet.done))
            only = set(grade_shards.deal(roster, shard[0], shard[1]))
            print(f"shard {shard[0]}/{shard[1]}: {len(only)} of {len(roster)} students", file=sys.stderr)
        _say_what_is_kept(sheet, roster, args.out)
        if not args.no_run:
            from .sandbox import isolation

            print(f"learners' code runs in: {isolation().describe()}", file=sys.stderr)

        def keep(row: Row) -> None:
            assert sheet is not None
            sheet.write(row)
            written.append(row)

        with sheet:
            rows = grade(args.class_dir, exercises=ids, timeout=args.timeout, run=not args.no_run,
                         bench=not args.no_bench, skip=sheet.graded(), on_row=keep,
                         compile_allowance=args.compile_timeout, only=only, seed=args.seed)
            everything = [*sheet.done, *rows]
            if manifest is not None and args.out is not None:
                grade_shards.finish(args.out, manifest, len(everything))
    except (KeyError, GradeError, FileNotFoundError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return _interrupted(args.out, written, sheet)
    finally:
        if sheet is not None:
            sheet.close()
    if args.out:
        print(f"wrote {args.out} ({len(rows)} new row(s), {len(everything)} in all)")
    print(summary(everything))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
