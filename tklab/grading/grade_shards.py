"""Grading a large class in parallel: ``grade --shard I/N`` on each node, then ``grade-merge`` into one CSV.

Why shards: a check on a GPU takes seconds to a minute, and a class of hundreds times ten exercises is
hours on one GPU. A Slurm job array or a Kubernetes indexed Job runs N copies of ``python -m tklab grade
--class DIR --shard I/N --out shards/shard-I.csv`` (I = 0 … N-1), each on its own GPU, and
``python -m tklab grade-merge --out grades.csv shards/shard-*.csv`` joins them (``deploy/grading/``).

Which students a shard grades: the class roster (every student folder's name, sorted; the same list a
single run walks) dealt round-robin, ``roster[I::N]``. Every node reading the same class folder computes
the same deal, shards differ by at most one student, and nobody is graded twice or never. The exercise
set is that of the whole class, so a shard writes exactly the rows a single run writes for its students.

Beside its CSV a shard writes ``<out>.shard.json`` (its manifest): I and N, the roster and its
fingerprint, the exercises, the grading options, a fingerprint of the grading code, the students it owns,
and whether it finished (names as the sheet writes them, ``tklab.grading.sheet.escape_name``). The merge
refuses, with a message naming the file, anything that would make the merged sheet differ from a single
run: a missing or duplicated shard, shards of different N, rosters (the class changed between shards),
exercises, options or code, a shard that did not finish, a row that is missing, foreign or duplicated,
and a manifest whose students are not the deal of its roster (edited to claim another shard's student:
each shard must own exactly ``roster[I::N]``, and the roster must be the one every shard fingerprinted).
Its rows come out in the single run's order, so shards merged are byte for byte the sheet one run
writes (``tests/test_grade_shards.py`` holds it to that).

Public API: ``parse_shard(text)``, ``deal(roster, index, count)``, ``code_fingerprint()``, ``Manifest``,
``manifest_path(out)``, ``begin(...)``, ``finish(...)``, ``merge(files, out)``, ``MergeError``,
``main(argv)`` (``python -m tklab grade-merge``).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .sheet import FIELDS, GradeError, OutLock, escape_name, read_rows

#: The manifest format; a merge refuses manifests of another version (2: the roster itself, names escaped).
VERSION = 2
_PACKAGE = Path(__file__).resolve().parents[1]  # the whole tklab package


class MergeError(ValueError):
    """Shards that cannot be merged into the sheet a single run would write (the message says why)."""


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` → (I, N) with 0 ≤ I < N; anything else is a ``GradeError`` saying what is expected."""
    parts = text.split("/")
    try:
        index, count = (int(p) for p in parts) if len(parts) == 2 else (None, None)
    except ValueError:
        index, count = None, None
    if index is None or count is None or count < 1 or not 0 <= index < count:
        raise GradeError(f"--shard {text!r}: expected I/N with 0 <= I < N (e.g. 0/8 … 7/8: shard I of N, "
                         "numbered from 0 as Slurm array and Kubernetes job indices are)")
    return index, count


def deal(roster: Sequence[str], index: int, count: int) -> list[str]:
    """The students shard ``index`` of ``count`` grades: every ``count``-th name of the sorted roster."""
    return sorted(roster)[index::count]


def roster_cells(roster: Sequence[str]) -> list[str]:
    """The roster as a manifest keeps it: in the deal's order, each name as the sheet writes it."""
    return [escape_name(n) for n in sorted(roster)]


def roster_fingerprint(roster: Sequence[str]) -> str:
    """Of the folder names (escaped, so one per line and any bytes at all)."""
    return _fingerprint(roster_cells(roster))


def _fingerprint(cells: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(cells).encode()).hexdigest()


def code_fingerprint() -> str:
    """A hash of the grading code (the ``tklab`` package's sources with the emulator's C++, and the exercises'
    specs, ``solutions/<id>/spec.py``), so shards graded by different versions of tklab are not merged as one sheet."""
    from . import specs

    h = hashlib.sha256()
    for p in sorted(_PACKAGE.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".so", ".o"):
            h.update(p.relative_to(_PACKAGE).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    for p in sorted(specs.root().glob(f"*/{specs.SPEC_FILE}")):
        h.update(f"{p.parent.name}/{p.name}".encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@dataclass
class Manifest:
    """What a shard graded and how; written beside its CSV as ``<out>.shard.json``."""

    shard: int
    shards: int
    roster_sha256: str
    roster_size: int
    exercises: list[str]
    options: dict[str, Any]
    code: str
    students: list[str]
    roster: list[str] = field(default_factory=list)
    class_dir: str = ""
    complete: bool = False
    rows: int = 0
    started: str = ""
    finished: str = ""
    version: int = VERSION
    host: str = field(default_factory=lambda: os.uname().nodename)

    def same_grading(self) -> dict[str, Any]:
        """What must agree between shards of one sheet (and between a shard and its resumed run)."""
        return {"shards": self.shards, "roster": self.roster_sha256, "exercises": self.exercises,
                "options": self.options, "code": self.code}


def manifest_path(out: Path) -> Path:
    return out.with_name(out.name + ".shard.json")


def _write(path: Path, m: Manifest) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(asdict(m), indent=1) + "\n")
    os.replace(tmp, path)  # a manifest is never half written


def read_manifest(out: Path) -> Manifest:
    """The manifest beside a shard's CSV; ``MergeError`` naming the file when it is absent or unreadable."""
    path = manifest_path(out)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise MergeError(f"{out}: no {path.name} beside it, so it is not a shard written by `tklab grade --shard` "
                         "(a sheet of one run needs no merging)") from None
    except (OSError, ValueError) as e:
        raise MergeError(f"{path}: cannot be read as a shard manifest ({e})") from None
    if data.get("version") != VERSION:
        raise MergeError(f"{path}: a shard manifest of version {data.get('version')!r}; this tklab merges version "
                         f"{VERSION}: grade every shard with the same tklab")
    try:
        return Manifest(**data)
    except TypeError as e:
        raise MergeError(f"{path}: not a shard manifest ({e})") from None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def begin(out: Path, *, index: int, count: int, roster: Sequence[str], exercises: Sequence[str],
          options: dict[str, Any], class_dir: Path, resuming: bool) -> Manifest:
    """Write (or, for a resumed sheet, check) the shard's manifest before anything is graded.

    A resumed shard must be the same shard of the same class graded the same way: otherwise its old rows
    and new rows would not belong to one sheet, and a ``GradeError`` says what changed.
    """
    m = Manifest(shard=index, shards=count, roster_sha256=roster_fingerprint(roster), roster_size=len(roster),
                 exercises=list(exercises), options=options, code=code_fingerprint(),
                 students=[escape_name(n) for n in deal(roster, index, count)], roster=roster_cells(roster),
                 class_dir=str(class_dir.resolve()), started=_now())
    path = manifest_path(out)
    if resuming:
        if not path.exists():
            raise GradeError(f"--out {out} holds rows but no {path.name}: it is not a shard's sheet; use another "
                             "--out, or --restart to set it aside")
        try:
            old = read_manifest(out)
        except MergeError as e:
            raise GradeError(str(e)) from None
        if (old.shard, old.shards) != (index, count):
            raise GradeError(f"--out {out} is shard {old.shard}/{old.shards}, not {index}/{count}; give each shard "
                             "its own --out")
        changed = [k for k, v in old.same_grading().items() if m.same_grading()[k] != v]
        if changed:
            raise GradeError(f"--out {out}: cannot resume, the {', '.join(changed)} changed since this shard began "
                             f"(roster {old.roster_size} → {len(roster)} students); --restart grades the shard again")
        m.started = old.started
    _write(path, m)
    return m


def finish(out: Path, m: Manifest, rows: int) -> None:
    """Mark the shard finished, with how many rows its sheet holds."""
    m.complete, m.rows, m.finished = True, rows, _now()
    _write(manifest_path(out), m)


# ---- merging -------------------------------------------------------------------------------------------

def _read_rows(path: Path) -> list[dict[str, str]]:
    try:
        return read_rows(path)
    except ValueError as e:
        raise MergeError(str(e)) from None


def _owns(f: Path, m: Manifest) -> None:
    """A shard owns exactly its deal of the roster it fingerprinted: an edited manifest is refused."""
    if _fingerprint(m.roster) != m.roster_sha256 or len(m.roster) != m.roster_size:
        raise MergeError(f"{manifest_path(f)}: its roster is not the one it fingerprinted (the manifest was edited); "
                         "grade the shard again")
    dealt = m.roster[m.shard::m.shards]
    if m.students != dealt:
        claimed = [s for s in m.students if s not in dealt]
        where = {s: i % m.shards for i, s in enumerate(m.roster)}
        if claimed:
            s = claimed[0]
            owner = f"shard {where[s]}/{m.shards}'s" if s in where else "not in the roster:"
            raise MergeError(f"{manifest_path(f)}: claims {s!r}, {owner} student, for shard {m.shard}/{m.shards} (the "
                             "manifest was edited); a shard owns every N-th name of the sorted roster")
        raise MergeError(f"{manifest_path(f)}: its students are not shard {m.shard}/{m.shards}'s deal of the roster "
                         f"(e.g. {sorted(set(dealt) - set(m.students))[:1]} is missing); grade the shard again")


def merge(files: Sequence[Path], out: Path, *, replace: bool = False) -> list[dict[str, str]]:
    """Check the shards belong together and are complete, then write their rows to ``out`` in the order of a
    single run. Raises ``MergeError`` (nothing written) naming the file and what is wrong."""
    if not files:
        raise MergeError("no shard sheets given")
    parent = out.parent if str(out.parent) else Path(".")
    if out.is_dir() or not parent.is_dir():
        raise MergeError(f"--out {out}: give a file name in an existing folder")
    if any(out.resolve() == f.resolve() for f in files):
        raise MergeError(f"--out {out} is one of the shards; write the merged sheet elsewhere")
    if out.exists() and out.stat().st_size and not replace:
        raise MergeError(f"--out {out} exists; choose another name, or --replace (the old file is kept as "
                         f"{out.name}.bak-<time>)")
    manifests = [(f, read_manifest(f)) for f in files]
    first_file, first = manifests[0]
    for f, m in manifests[1:]:
        for key, value in first.same_grading().items():
            if m.same_grading()[key] != value:
                what = {"shards": "a different number of shards", "roster": "a different class roster (the class "
                        "folder changed between shards, or they graded different classes)",
                        "exercises": "different exercises", "options": "different grading options",
                        "code": "a different version of tklab"}[key]
                shown = f" ({m.same_grading()[key]} vs {value})" if key in ("shards", "exercises", "options") else ""
                raise MergeError(f"{f} and {first_file} cannot be merged: they were graded with {what}{shown}; "
                                 "grade every shard of a sheet the same way")
    by_index: dict[int, Path] = {}
    for f, m in manifests:
        if m.shard in by_index:
            raise MergeError(f"shard {m.shard}/{m.shards} is given twice: {by_index[m.shard]} and {f}")
        by_index[m.shard] = f
    missing = [i for i in range(first.shards) if i not in by_index]
    if missing:
        raise MergeError(f"shard(s) {', '.join(f'{i}/{first.shards}' for i in missing)} missing: {len(by_index)} of "
                         f"{first.shards} given ({', '.join(str(f) for f, _ in manifests)})")
    rows: list[tuple[tuple[int, int], dict[str, str]]] = []
    ex_order = {ex: i for i, ex in enumerate(first.exercises)}
    order = {s: i for i, s in enumerate(first.roster)}
    for f, m in manifests:
        if not m.complete:
            raise MergeError(f"{f}: shard {m.shard}/{m.shards} did not finish (its manifest says so); rerun it with "
                             "the same --out to resume it")
        _owns(f, m)
        if m.roster != first.roster:
            raise MergeError(f"{f} and {first_file} cannot be merged: their rosters differ (a manifest was edited)")
        got = _read_rows(f)
        expected = {(c, ex) for c in m.students for ex in m.exercises}
        seen: set[tuple[str, str]] = set()
        for r in got:
            key = (r["student"], r["exercise"])
            if key not in expected:
                raise MergeError(f"{f}: a row for {key[0]!r} / {key[1]} that shard {m.shard}/{m.shards} does not own")
            if key in seen:
                raise MergeError(f"{f}: {key[0]!r} / {key[1]} appears twice")
            seen.add(key)
            rows.append(((order[key[0]], ex_order[key[1]]), r))  # a single run's order: name, then exercise
        if seen != expected:
            lacking = sorted(expected - seen)
            raise MergeError(f"{f}: {len(lacking)} row(s) missing, e.g. {lacking[0][0]!r} / {lacking[0][1]}; rerun the "
                             "shard with the same --out to grade what is missing")
    rows.sort(key=lambda kr: kr[0])
    try:
        lock = OutLock(out).acquire()  # one merge (or grader) writes a sheet at a time
    except GradeError as e:
        raise MergeError(str(e)) from None
    try:
        if out.exists() and out.stat().st_size:
            if not replace:
                raise MergeError(f"--out {out} was written while this merge ran; nothing written")
            out.rename(out.with_name(f"{out.name}.bak-{time.strftime('%Y%m%d-%H%M%S')}"))
        tmp = out.with_name(out.name + ".tmp")
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            for _, r in rows:
                w.writerow(r)
        os.replace(tmp, out)
    finally:
        lock.release()
    return [r for _, r in rows]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tklab grade-merge --out grades.csv SHARD.csv ...``: exit 0 merged, 2 refused."""
    ap = argparse.ArgumentParser(prog="python -m tklab grade-merge",
                                 description="Merge the sheets of `tklab grade --shard I/N` into one CSV.")
    ap.add_argument("shards", nargs="+", type=Path, help="the shards' CSV files (their .shard.json beside them)")
    ap.add_argument("--out", type=Path, required=True, help="the merged CSV")
    ap.add_argument("--replace", action="store_true", help="replace an existing --out (kept as <name>.bak-<time>)")
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        rows = merge(args.shards, args.out, replace=args.replace)
    except MergeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    students = len({r["student"] for r in rows})
    print(f"wrote {args.out}: {len(rows)} rows, {students} students, from {len(args.shards)} shards")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
