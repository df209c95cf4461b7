"""Instructor mode: ``python -m tklab grade --class DIR [--out grades.csv]``.

DIR holds one folder per student; in it (at any depth) the student's exercise files, named as in
``exercises/`` (``ch02_smem_tiling.cu`` …). Every file is checked exactly as a learner's ``python -m
tklab check`` would, but each check runs in its own process with a time limit, so one student's
crashing compile, faulting kernel or endless loop costs that student's row and nothing more.

The CSV has one row per (student, exercise): ``student, exercise, compiled, correct, speed_ratio,
message`` with ``compiled`` yes/no, ``correct`` yes/no/not run (no GPU here) /missing, and
``speed_ratio`` = library time / student's time when it was measured. A summary table follows.

Public API: ``grade(class_dir, ...) -> list[Row]``, ``Row``, ``main(argv)``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from . import specs

FIELDS = ("student", "exercise", "compiled", "correct", "speed_ratio", "message")
_PACKAGE_PARENT = Path(__file__).resolve().parent.parent


@dataclass
class Row:
    """One line of the grade sheet."""

    student: str
    exercise: str
    compiled: str
    correct: str
    speed_ratio: str
    message: str


def find_submissions(student_dir: Path, exercise_ids: Sequence[str]) -> dict[str, Path]:
    """{exercise id: file} for the files in a student's folder named after an exercise (backups skipped)."""
    found: dict[str, Path] = {}
    for ex in exercise_ids:
        name = specs.get(ex).filename
        hits = sorted(p for p in student_dir.rglob(name) if p.is_file())
        if hits:
            found[ex] = min(hits, key=lambda p: len(p.parts))  # the shallowest, if a student has copies
    return found


def _check_in_subprocess(exercise: str, path: Path, *, timeout: float, run: bool, bench: bool) -> dict:
    """Run ``python -m tklab.check --json`` on one file; a crash or hang of the checker becomes a dict."""
    cmd = [sys.executable, "-m", "tklab.check", "--json", "--exercise", exercise, str(path),
           "--timeout", str(timeout)]
    if not run:
        cmd.append("--no-run")
    if not bench:
        cmd.append("--no-bench")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_PARENT), env.get("PYTHONPATH")) if p)
    limit = timeout + 240.0  # the run has its own limit; this one covers a compile that never ends
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=env,
                              start_new_session=True)
    except subprocess.TimeoutExpired:
        return {"compiled": None, "passed": False, "summary": f"the check did not finish within {limit:g} s "
                "(a compile that never ends?)"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"compiled": None, "passed": False, "summary": f"the checker crashed (exit {proc.returncode}): {tail}"}


def _row(student: str, exercise: str, d: dict) -> Row:
    compiled = {True: "yes", False: "no", None: "?"}[d.get("compiled")]
    correct = {True: "yes", False: "no", None: "not run"}[d.get("passed")]
    ratio = d.get("speed_ratio")
    return Row(student, exercise, compiled, correct, f"{ratio:.3f}" if isinstance(ratio, (int, float)) else "",
               " ".join(str(d.get("summary", "")).split()))


def grade(class_dir: str | Path, *, exercises: Sequence[str] | None = None, timeout: float = 60.0,
          run: bool = True, bench: bool = True, progress: bool = True) -> list[Row]:
    """Check every student's files; exercises nobody submitted are left out unless named in ``exercises``."""
    class_dir = Path(class_dir)
    if not class_dir.is_dir():
        raise FileNotFoundError(f"{class_dir} is not a folder (expected one folder per student)")
    ids = list(exercises) if exercises else specs.all_ids()
    students = sorted(p for p in class_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
    found = {s.name: find_submissions(s, ids) for s in students}
    if not exercises:
        ids = [ex for ex in ids if any(ex in f for f in found.values())]
    rows: list[Row] = []
    for s in students:
        for ex in ids:
            path = found[s.name].get(ex)
            if path is None:
                rows.append(Row(s.name, ex, "", "missing", "", f"no {specs.get(ex).filename} in {s.name}/"))
                continue
            if progress:
                print(f"  {s.name}: {ex} …", file=sys.stderr, flush=True)
            rows.append(_row(s.name, ex, _check_in_subprocess(ex, path, timeout=timeout, run=run, bench=bench)))
    return rows


def write_csv(rows: Sequence[Row], out: Path | None) -> None:
    handle = open(out, "w", newline="") if out else sys.stdout  # noqa: SIM115 - stdout is not ours to close
    try:
        w = csv.DictWriter(handle, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow(asdict(r))
    finally:
        if out:
            handle.close()


def summary(rows: Sequence[Row]) -> str:
    """Per exercise: how many submitted, compiled, passed, and the median speed ratio."""
    lines = [f"{'exercise':<26}{'submitted':>10}{'compiled':>10}{'correct':>9}{'not run':>9}{'median speed':>14}"]
    for ex in dict.fromkeys(r.exercise for r in rows):
        rs = [r for r in rows if r.exercise == ex and r.correct != "missing"]
        ratios = [float(r.speed_ratio) for r in rs if r.speed_ratio]
        med = f"{statistics.median(ratios):.2f}×" if ratios else "–"
        lines.append(f"{ex:<26}{len(rs):>10}{sum(r.compiled == 'yes' for r in rs):>10}"
                     f"{sum(r.correct == 'yes' for r in rs):>9}{sum(r.correct == 'not run' for r in rs):>9}{med:>14}")
    students = list(dict.fromkeys(r.student for r in rows))
    per = ", ".join(f"{s} {sum(r.correct == 'yes' for r in rows if r.student == s)}" for s in students)
    lines.append(f"correct per student: {per}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tklab grade --class DIR [--out grades.csv]``; exit 0 once every file was graded."""
    ap = argparse.ArgumentParser(prog="python -m tklab grade", description="Grade a class folder.")
    ap.add_argument("--class", dest="class_dir", required=True, type=Path, help="one folder per student")
    ap.add_argument("--out", type=Path, default=None, help="CSV file to write (default: print it)")
    ap.add_argument("--exercises", nargs="*", default=None, help="exercise ids or prefixes (default: all "
                    "that anyone submitted)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per run (each file)")
    ap.add_argument("--no-run", action="store_true", help="static checks only")
    ap.add_argument("--no-bench", action="store_true", help="do not time against the library")
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        ids = [specs.find(e).id for e in args.exercises] if args.exercises else None
        rows = grade(args.class_dir, exercises=ids, timeout=args.timeout, run=not args.no_run,
                     bench=not args.no_bench)
    except (KeyError, FileNotFoundError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    write_csv(rows, args.out)
    if args.out:
        print(f"wrote {args.out} ({len(rows)} rows)")
    print(summary(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
