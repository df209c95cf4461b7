"""The speed challenges (exercises whose id holds ``_challenge_``) and their class leaderboard.

A challenge is an exercise whose starting file is a correct, deliberately plain kernel that the learner may rewrite
entirely; the check holds its output to the reference on fresh random inputs (the correctness gate) and, on a GPU,
times it against the library in the same run (``speed_ratio`` = library time / the learner's time). Nothing else
grades it: no speed target, no concept floor.

The leaderboard is made from grade sheets only (``python -m tklab grade --out grades.csv``), never from a student's
folder: ``python -m tklab leaderboard grades.csv [more.csv ...] [--md board.md] [--csv board.csv]``. Per challenge
and GPU, each student's best passing ratio is ranked, highest first; equal ratios (as the sheet writes them, three
decimals) rank by the time the file was submitted (the sheet's ``submitted`` column, the file's modification time
in the class folder as the grader's intake copied it), earlier first, and a row without a submitted time after the
others. A row that failed, or passed without a ratio (checked on the CPU: correctness only, no timing), is listed
with what it is and never ranked. A sheet that is not a grade sheet, or a row whose cells do not parse, is refused
with ``LeaderboardError`` naming the file, the line and the cell.

Where a challenge is checked without a GPU, its report shows the reference's and the library's speed as recorded on
the H200 by ``bench/challenges.py`` (``bench/results/challenges_<date>_<commit>.json``, read when the report is
made; "no H200 record yet" until it has run): ``RecordedNumbers``, a line of its static checks that never fails.

Public API: ``MARK``, ``is_challenge``, ``Entry``, ``LeaderboardError``, ``board(rows)``, ``read_sheets(paths)``,
``markdown(entries)``, ``csv_text(entries)``, ``recorded(id)``, ``recorded_text(id)``, ``RecordedNumbers``,
``main(argv)``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..paths import REPO
from ..recorded import newest

#: What every challenge's id holds (issue 42): ``ch08_challenge_gemm_skinny``.
MARK = "_challenge_"
#: Where ``bench/challenges.py`` writes its records.
RESULTS = REPO / "bench" / "results"
RECORD_GLOB = "challenges_*.json"


def is_challenge(exercise: Any) -> bool:
    """Whether an exercise (its id, or its spec) is a speed challenge."""
    return MARK in str(getattr(exercise, "id", exercise)).split("@", 1)[0]


class LeaderboardError(ValueError):
    """A sheet the leaderboard cannot be made from: not a grade sheet, or a row whose cells do not parse."""


@dataclass(frozen=True)
class Entry:
    """One student's standing on one challenge: ranked (``rank`` from 1) or listed with why it is not."""

    exercise: str
    student: str  # the name as the sheet writes it (escaped: one printable line)
    status: str  # "ranked", "correct, no ratio", "failed", "not verified"
    ratio: float | None
    device: str
    submitted: str
    message: str
    rank: int | None = None
    sheet: str = ""
    line: int = 0


def _parse_time(text: str) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def _entry(row: dict[str, str], sheet: str, line: int) -> Entry | None:
    """A sheet's row as an entry (None: the student submitted nothing for it); ``LeaderboardError`` naming the row."""
    where = f"{sheet}, line {line} ({row.get('student', '?')!r} / {row.get('exercise', '?')})"
    correct = row.get("correct", "")
    if correct in ("missing", "refused", ""):
        return None
    if correct not in ("yes", "no", "not verified"):
        raise LeaderboardError(f"{where}: correct is {correct!r}, not yes / no / not verified / missing / refused")
    ratio: float | None = None
    if row.get("speed_ratio"):
        try:
            ratio = float(row["speed_ratio"])
        except ValueError:
            raise LeaderboardError(f"{where}: speed_ratio {row['speed_ratio']!r} is not a number") from None
        if not (math.isfinite(ratio) and ratio > 0):
            raise LeaderboardError(f"{where}: speed_ratio {row['speed_ratio']!r} is not a positive number")
    try:
        _parse_time(row.get("submitted", ""))
    except ValueError:
        raise LeaderboardError(f"{where}: submitted {row['submitted']!r} is not a time (ISO 8601, as the grader "
                               "writes it: 2026-12-04T16:50:00Z)") from None
    device = row.get("device", "")
    if correct == "yes" and ratio is not None and row.get("established") == "gpu" and device:
        status = "ranked"
    elif correct == "yes":
        status = "correct, no ratio"
    elif correct == "no":
        status = "failed"
    else:
        status = "not verified"
    return Entry(row["exercise"], row["student"], status, ratio, device, row.get("submitted", ""),
                 row.get("message", ""), None, sheet, line)


def read_sheets(paths: Sequence[Path]) -> list[Entry]:
    """Every challenge row of the grade sheets at ``paths`` (students submitting nothing left out)."""
    from .sheet import FIELDS, read_rows

    out: list[Entry] = []
    for path in paths:
        try:
            rows = read_rows(Path(path))
        except ValueError as e:
            raise LeaderboardError(f"{e} (expected the sheet `python -m tklab grade --out` writes: "
                                   f"{', '.join(FIELDS)})") from None
        for line, row in enumerate(rows, start=2):
            if is_challenge(row["exercise"]):
                e = _entry(row, str(path), line)
                if e is not None:
                    out.append(e)
    return out


def board(entries: Iterable[Entry]) -> list[Entry]:
    """The leaderboard: per challenge and device, each student's best ranked entry, ranked (highest ratio first;
    equal ratios by submission, earlier first; no submitted time last); then everyone's other standing once (a
    student ranked on a challenge is not listed again for it), unranked."""
    entries = list(entries)
    best: dict[tuple[str, str, str], Entry] = {}
    for e in entries:
        if e.status != "ranked":
            continue
        key = (e.exercise, e.device, e.student)
        if key not in best or _order(e) < _order(best[key]):
            best[key] = e
    ranked: list[Entry] = []
    for exercise, device in sorted({(k[0], k[1]) for k in best}):
        group = sorted((e for k, e in best.items() if k[:2] == (exercise, device)), key=_order)
        ranked += [dataclasses.replace(e, rank=i) for i, e in enumerate(group, start=1)]
    on_board = {(e.exercise, e.student) for e in ranked}
    rest: dict[tuple[str, str], Entry] = {}
    for e in entries:
        key = (e.exercise, e.student)
        if e.status == "ranked" or key in on_board:
            continue
        if key not in rest or _standing(e) < _standing(rest[key]):
            rest[key] = e
    return ranked + sorted(rest.values(), key=lambda e: (e.exercise, _standing(e), e.student))


def _order(e: Entry) -> tuple[float, int, str, str]:
    when = _parse_time(e.submitted)
    return (-round(e.ratio or 0.0, 3), 0 if when else 1, when.isoformat() if when else "", e.student)


def _standing(e: Entry) -> int:
    return {"correct, no ratio": 0, "not verified": 1, "failed": 2}.get(e.status, 3)


COLUMNS = ("exercise", "rank", "student", "speed_ratio", "device", "submitted", "status", "message")


def _cells(e: Entry) -> list[str]:
    return [e.exercise, str(e.rank) if e.rank else "", e.student, f"{e.ratio:.3f}" if e.ratio else "", e.device,
            e.submitted, e.status, e.message]


def csv_text(entries: Sequence[Entry]) -> str:
    """The leaderboard as CSV, one line an entry (``COLUMNS``)."""
    from .sheet import cell

    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(COLUMNS)
    for e in entries:
        w.writerow([cell(c) for c in _cells(e)])
    return out.getvalue()


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(entries: Sequence[Entry]) -> str:
    """The leaderboard as markdown: per challenge, the ranked table, then who is not ranked and why."""
    lines = ["# Challenge leaderboard", "",
             "Each student's best passing ratio (library time / theirs, timed in the same run by `tklab grade` on a "
             "GPU); equal ratios rank by submission time, earlier first. Rows that failed or were checked without a "
             "GPU (no ratio) are listed, never ranked."]
    for exercise in dict.fromkeys(e.exercise for e in entries):
        mine = [e for e in entries if e.exercise == exercise]
        lines += ["", f"## {exercise}"]
        for device in dict.fromkeys(e.device for e in mine if e.rank):
            lines += ["", f"on {device}:", "", "| rank | student | ratio | submitted |", "|---:|---|---:|---|"]
            lines += [f"| {e.rank} | {_md(e.student)} | {e.ratio:.3f}× | {e.submitted or '(unknown)'} |"
                      for e in mine if e.rank and e.device == device]
        unranked = [e for e in mine if not e.rank]
        if unranked:
            lines += ["", "not ranked:", ""]
            lines += [f"- {_md(e.student)}: {e.status}" + (f" ({_md(e.message)})" if e.message else "")
                      for e in unranked]
    return "\n".join(lines) + "\n"


# ---- the recorded H200 numbers a CPU check shows ------------------------------------------------------------

def recorded(exercise: str, results: Path | None = None) -> dict[str, Any] | None:
    """The newest record of ``exercise`` in ``bench/results/challenges_*.json`` (by the record's date, then file
    name): {"device", "commit", "date", "file", and the challenge's entry: reference_ms, library_ms, ...}; None when
    none holds it (or the folder is not there: the sandboxed run sees no bench/)."""
    folder = RESULTS if results is None else results

    def holding(path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        entry = (data.get("challenges") or {}).get(exercise) if isinstance(data, dict) else None
        return data if isinstance(entry, dict) and not data.get("dry_run") else None

    def date(path: Path) -> str | None:
        data = holding(path)
        return None if data is None else str(data.get("date", ""))

    path = newest(folder.glob(RECORD_GLOB) if folder.is_dir() else [], date)
    data = holding(path) if path is not None else None
    if path is None or data is None:
        return None
    return {"device": data.get("device", ""), "commit": data.get("commit", ""), "date": data.get("date", ""),
            "file": f"bench/results/{path.name}", **data["challenges"][exercise]}


def recorded_text(exercise: str, results: Path | None = None) -> str:
    """The recorded H200 numbers in one sentence, or "no H200 record yet"."""
    r = recorded(exercise, results)
    if r is None:
        return (f"no H200 record yet of {exercise}'s reference against the library (`python bench/challenges.py` "
                "on an H200 writes it to bench/results/challenges_*.json)")
    ref, lib = r.get("reference_ms"), r.get("library_ms")
    if not (isinstance(ref, (int, float)) and isinstance(lib, (int, float)) and ref > 0 and lib > 0):
        return f"{r['file']} holds no timing of {exercise} ({r.get('error', 'malformed entry')})"
    return (f"recorded on {r['device']} ({r['date']}, commit {r['commit']}, {r['file']}): the reference solution "
            f"{ref:.3f} ms, {r.get('library', 'the library')} {lib:.3f} ms: {lib / ref:.2f}x the library at "
            f"{r.get('dims', 'the benchmark size')}; this machine has no GPU, so your check times nothing")


@dataclass(frozen=True)
class RecordedNumbers:
    """A challenge's report line (in its spec's ``static``; it never fails): without a GPU, the reference's and the
    library's speed as recorded on the H200 (``recorded_text``, read when the check runs); on a GPU, that the check
    times the learner's kernel against the library here."""

    exercise: str
    name: str = "recorded H200 numbers"

    def run(self, ctx: Any) -> Any:
        from ..run import gpu
        from .spec_kit import StaticResult

        if gpu.available():
            return StaticResult(self.name, True, "this check times your kernel against the library on this GPU, in "
                                "the same run (the speed row below)")
        return StaticResult(self.name, True, recorded_text(self.exercise))


# ---- python -m tklab leaderboard -----------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tklab leaderboard SHEET [SHEET ...] [--md FILE] [--csv FILE]``: exit 2 on a sheet it refuses."""
    ap = argparse.ArgumentParser(prog="python -m tklab leaderboard",
                                 description="The challenges' class leaderboard, from grade sheets only.")
    ap.add_argument("sheets", nargs="+", type=Path, help="grade sheets written by `python -m tklab grade --out`")
    ap.add_argument("--md", type=Path, default=None, help="write the markdown leaderboard here (default: print it)")
    ap.add_argument("--csv", type=Path, default=None, help="write the leaderboard as CSV here")
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        entries = board(read_sheets(args.sheets))
    except LeaderboardError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = markdown(entries)
    if args.md is None:
        print(text, end="")
    else:
        args.md.write_text(text)
        print(f"wrote {args.md}")
    if args.csv is not None:
        args.csv.write_text(csv_text(entries))
        print(f"wrote {args.csv}")
    if not entries:
        print("(no challenge rows in the sheet(s): grade the challenges with `python -m tklab grade`)", file=sys.stderr)
    return 0
