"""How fast a shard of a class is graded: students per minute on one GPU (or on this CPU), whole exercise set.

    python bench/grading_rate.py --students 12 --shard 0/3        # on the H200: one shard of a synthetic class
    python bench/grading_rate.py --small                           # on a CPU: 3 students, ch01 + ch02, no timing

A synthetic class of N students is built in a temporary folder: every exercise for every student, the
solution for 3 in 5 of them, the untouched exercise (compiles, fails) for 1 in 5 and a file that does
not compile for 1 in 5; each file starts with a line of code naming its student, so no two files are
alike and no compiled module is shared between students (a real class has no two identical files
either). The compile cache starts empty (but with ``--small``), so the first student also pays the
one-time builds (the CPU emulator's runtime); the seconds of each student are reported. One shard of
it is graded exactly as ``python -m tklab grade --shard I/N`` does (each check in its own process, the
learner's kernel sandboxed, timed against the library unless ``--no-bench``), one student after the
other; ``--budget`` seconds stop it before a new student would start (the rate is then over the students
finished, and the report says so). Every row's verdict is compared with what its kind of file must get,
so a rate is never reported for grading that went wrong.

Writes ``grading_rate_<date>_<commit>.{json,md}`` into ``$OUT`` (or ``--out``, else ``bench/results/``)
with the device, commit and date: students per minute (per GPU when it ran on one), seconds per
student, and per exercise the median and longest check.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tklab import grade, grade_shards, specs  # noqa: E402
from tklab.grading.exercises import SOLUTIONS, plan  # noqa: E402

KINDS = ("solution", "untouched", "broken", "solution", "solution")  # student k gets KINDS[k % 5]


def _commit() -> str:
    if os.environ.get("GIT_COMMIT"):
        return os.environ["GIT_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _device() -> tuple[str, bool]:
    from tklab import gpu

    if gpu.available():
        return f"{gpu.name()} ({gpu.arch()})", True
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU only: {cpu}, {os.cpu_count()} cores", False


def build_class(root: Path, students: int, exercises: Sequence[str]) -> dict[str, str]:
    """One folder per synthetic student; returns {student: kind}."""
    generated = plan(SOLUTIONS)
    kinds = {}
    for k in range(students):
        name = f"s{k:04d}"
        kind = KINDS[k % len(KINDS)]
        kinds[name] = kind
        (root / name).mkdir(parents=True)
        for ex in exercises:
            spec = specs.get(ex)
            rel = spec.exercise_file
            text = (ROOT / spec.solution).read_text() if kind == "solution" else generated[rel][1]
            # code (not a comment, which preprocessing drops) that differs per student, so no compiled module is
            # shared between two students through the compile caches, as none is between real ones
            mark = (f"SYNTHETIC_STUDENT = {name!r}  # bench/grading_rate.py\n" if spec.language == "numba" else
                    f"namespace {{ [[maybe_unused]] constexpr int synthetic_student_{name} = {k}; }}  "
                    "// bench/grading_rate.py\n")
            text = mark + text
            if kind == "broken":
                text += "\nthis line is not code (planted by bench/grading_rate.py)\n"
            (root / name / spec.filename).write_text(text)
    return kinds


def expected(kind: str, row: grade.Row, on_gpu: bool) -> bool:
    """Whether a row's verdict is the one its kind of file must get."""
    if kind == "broken":
        return row.compiled == "no" and row.correct == "no"
    if kind == "untouched":
        return row.compiled == "yes" and row.correct == "no"
    # a solution is right; only a machine with neither a GPU nor a C++ compiler may leave it unverified
    return row.compiled == "yes" and row.correct in (("yes",) if on_gpu else ("yes", "not verified"))


def run(students: int, shard: tuple[int, int], exercises: Sequence[str], *, bench: bool, timeout: float,
        budget: float, keep: Path | None = None, fresh_cache: bool = True) -> dict[str, Any]:
    device, on_gpu = _device()
    work = Path(tempfile.mkdtemp(prefix="tklab-grading-rate-")) if keep is None else keep
    cache_before = os.environ.get("TKLAB_CACHE_DIR")
    if fresh_cache:
        os.environ["TKLAB_CACHE_DIR"] = str(work / "tklab-cache")  # the checks' compile cache starts empty
    try:
        cls = work / "class"
        kinds = build_class(cls, students, exercises)
        roster, ids = grade.plan(cls, exercises)
        mine = grade_shards.deal(roster, *shard)
        timings: dict[str, list[float]] = {ex: [] for ex in ids}
        real = grade._check_in_subprocess

        def timed(ex: str, path: Path, **kw: Any) -> dict:
            t = time.monotonic()
            try:
                return real(ex, path, **kw)
            finally:
                timings[ex].append(time.monotonic() - t)

        grade._check_in_subprocess = timed  # type: ignore[assignment]
        rows: list[grade.Row] = []
        finished: list[str] = []
        t0 = time.monotonic()
        stopped = False
        per_student = []
        try:
            for s in mine:
                if finished and time.monotonic() - t0 > budget:
                    stopped = True
                    break
                ts = time.monotonic()
                rows += grade.grade(cls, exercises=ids, timeout=timeout, bench=bench, progress=True, only={s})
                per_student.append(round(time.monotonic() - ts, 1))
                finished.append(s)
        finally:
            grade._check_in_subprocess = real  # type: ignore[assignment]
        wall = time.monotonic() - t0
        from tklab.grading.sandbox import isolation

        wrong = [f"{r.student} ({kinds[r.student]}) {r.exercise}: compiled={r.compiled} correct={r.correct}: "
                 f"{r.message[:160]}" for r in rows if not expected(kinds[r.student], r, on_gpu)]
        established = sorted({r.established for r in rows if r.established})
        verdicts: dict[str, dict[str, int]] = {}
        for r in rows:
            tally = verdicts.setdefault(kinds[r.student], {})
            tally[r.correct] = tally.get(r.correct, 0) + 1
        return {
            "device": device, "gpu": on_gpu, "commit": _commit(), "date": datetime.date.today().isoformat(),
            "host": platform.node(), "students_in_class": students, "shard": f"{shard[0]}/{shard[1]}",
            "students_in_shard": len(mine), "students_graded": len(finished), "stopped_by_budget": stopped,
            "budget_s": budget, "exercises": list(ids), "bench": bench, "timeout_s": timeout,
            "compile_cache": "empty at the start" if fresh_cache else "as left by earlier runs",
            "isolation": isolation(gpu=on_gpu).describe(), "established": established,
            "kinds": {k: sum(kinds[s] == k for s in finished) for k in dict.fromkeys(KINDS)},
            "wall_s": round(wall, 1), "seconds_per_student": round(wall / max(1, len(finished)), 1),
            "per_student_s": dict(zip(finished, per_student, strict=True)),
            "students_per_minute": round(60.0 * len(finished) / wall, 3) if wall > 0 else None,
            "checks": sum(map(len, timings.values())),
            "per_exercise": {ex: {"checks": len(ts), "median_s": round(statistics.median(ts), 1),
                                  "max_s": round(max(ts), 1)} for ex, ts in timings.items() if ts},
            "verdicts": verdicts, "verdicts_as_expected": f"{len(rows) - len(wrong)}/{len(rows)}",
            "unexpected": wrong,
        }
    finally:
        if cache_before is None:
            os.environ.pop("TKLAB_CACHE_DIR", None)
        else:
            os.environ["TKLAB_CACHE_DIR"] = cache_before
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


def markdown(r: dict[str, Any]) -> str:
    per = "per GPU" if r["gpu"] else "on this CPU"
    timing = ("on" if r["gpu"] else "asked for, but nothing is timed without a GPU") if r["bench"] else "off"
    lines = [f"# Grading rate: {r['students_per_minute']} students per minute {per}", "",
             f"{r['device']}; commit {r['commit']}; {r['date']}; host {r['host']}.", "",
             f"- shard {r['shard']} of a synthetic class of {r['students_in_class']} ({r['students_in_shard']} in the "
             f"shard, {r['students_graded']} graded{'; stopped by the time budget' if r['stopped_by_budget'] else ''}"
             f"), every student handing in {len(r['exercises'])} exercises ({', '.join(r['exercises'])})",
             f"- kinds of student graded: {r['kinds']} (solution: the reference answer; untouched: the exercise as "
             "generated; broken: does not compile)",
             f"- {r['checks']} checks in {r['wall_s']} s: {r['seconds_per_student']} s per student (each: "
             f"{', '.join(f'{s} {v} s' for s, v in r['per_student_s'].items())}); timing against "
             f"the library {timing}; "
             f"run limit {r['timeout_s']} s per file",
             f"- learners' code ran in: {r['isolation']}; outputs judged by: {', '.join(r['established']) or '-'}; "
             f"compile cache: {r['compile_cache']}",
             f"- verdicts as expected: {r['verdicts_as_expected']}; by kind of student: "
             + "; ".join(f"{k}: " + ", ".join(f"{n} {v}" for v, n in t.items()) for k, t in r["verdicts"].items()),
             "",
             "| exercise | checks | median s | longest s |", "|---|---|---|---|"]
    lines += [f"| {ex} | {d['checks']} | {d['median_s']} | {d['max_s']} |" for ex, d in r["per_exercise"].items()]
    if r["unexpected"]:
        lines += ["", "Unexpected verdicts:", *[f"- {u}" for u in r["unexpected"]]]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--students", type=int, default=12, help="students in the synthetic class (default 12)")
    ap.add_argument("--shard", default="0/1", help="the shard I/N to grade (default 0/1: everyone)")
    ap.add_argument("--exercises", nargs="*", default=None, help="exercise ids or prefixes (default: all)")
    ap.add_argument("--no-bench", action="store_true", help="do not time against the library")
    ap.add_argument("--timeout", type=float, default=120.0, help="run limit per file, seconds")
    ap.add_argument("--budget", type=float, default=480.0, help="start no new student after this many seconds")
    ap.add_argument("--small", action="store_true", help="3 students (one of each kind), ch01 and ch02, no "
                    "timing, the compile cache as it is: the CPU smoke run (its rate means little)")
    ap.add_argument("--out", type=Path, default=None, help="folder for the results (default $OUT, else "
                    "bench/results/)")
    ap.add_argument("--keep", type=Path, default=None, help="build the class here and keep it")
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    shard = grade_shards.parse_shard(args.shard)
    if args.small:
        args.students, args.exercises, args.no_bench = 3, ["ch01", "ch02"], True
    ids = [specs.find(e).id for e in args.exercises] if args.exercises else specs.all_ids()
    r = run(args.students, shard, ids, bench=not args.no_bench, timeout=args.timeout, budget=args.budget,
            keep=args.keep, fresh_cache=not args.small)
    out = args.out or Path(os.environ.get("OUT") or ROOT / "bench" / "results")
    out.mkdir(parents=True, exist_ok=True)
    stem = f"grading_rate_{r['date']}_{r['commit']}" + ("" if r["gpu"] else "_cpu")
    (out / f"{stem}.json").write_text(json.dumps(r, indent=1) + "\n")
    (out / f"{stem}.md").write_text(markdown(r))
    print(markdown(r))
    print(f"wrote {out / stem}.json and .md")
    return 0 if not r["unexpected"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
