"""Solutions → exercises: the learner's copy is generated from the complete solution, never hand-written.

A solution file in ``solutions/`` (an exercise's in its folder, ``solutions/<id>/<id>.cu``: ``exercise_path``) marks the
parts a learner writes::

    // BEGIN SOLUTION hint: each thread loads one element of each tile
    As[ty][tx] = A[row * K + k0 + tx];
    // STUB: acc = 0.0f;          <- optional: code the exercise keeps in place of the region
    // END SOLUTION

(``#`` instead of ``//`` in Python). ``exercises/`` gets the same file with each region replaced by a
TODO that says about how many lines it takes and its goal (the ``hint:`` text: what to achieve, never
the calls to write; ``tests/test_spoilers.py`` holds it to that), the first TODO also where the hints
are (``tklab.hint``), plus any ``STUB:`` lines, so the exercise still compiles (a C++ stub leaves its
outputs unwritten; a Python stub gets ``pass``). Why one source of truth: an exercise and its solution
can never drift apart, and CI can prove it (``--check``).

Learners edit their exercise files, so regenerating must never eat their work. ``exercises/.manifest.json``
records the hash of every file as last generated; a file whose hash differs was edited, and
regeneration stops and names it, unless ``--backup`` copies it aside to ``<name>.bak-<timestamp>``.

A missing or mistyped ``--solutions`` folder would plan nothing, and every unedited exercise would look
stale and be removed: ``sync``, ``differences`` and ``--check`` refuse a solutions folder that does not
exist or holds no solution (``SolutionsError``) and touch nothing.

Exercise files are named after their exercise's id. A file renamed so (``RENAMED_FILES``) keeps its
learner's work: ``sync`` moves an edited old-name file to the new name when the new one holds nothing of
the learner's, keeps both and says so otherwise, and removes an old-name file the generator wrote.

``python -m tklab exercises`` (``tklab.grading.index.main``) runs ``sync``; the workbook's index is
``tklab.grading.index``.

A debugging exercise (its id holds ``_debug_``: ``is_debug``) is a working-looking program with one bug in it. Its
solution is the right program, and marks where the bug goes::

    // BEGIN BUG hint: y = x A for any K and N   <- what the program should do (never where the bug is)
    __syncthreads();                               <- the right line(s)
    // BUG: <a buggy line>                         <- optional, one comment line each: the line(s) the exercise has
    // END BUG                                        instead (none: the bug is that the right lines are missing)

The exercise is the solution with the markers gone and the right lines replaced by the buggy ones: no marker,
comment, blank line or indentation tells where (a ``BUG:`` line keeps the spacing after ``BUG: ``, so write it
indented as the code it replaces). The hints go to the file's header, with what the learner is asked to do; a
comment that says BUG, TODO or fix beside a buggy line is refused (``RegionError``), as are BUG regions in a
file whose id is not a debugging exercise's, both kinds of region in one file, and a region whose buggy lines
are the right ones. ``fixed(...)`` is the exercise with the bug fixed; the hint's level 3 is the diff between the
two (``fix_diff``). ``tklab.grading.untouched`` judges a debugging exercise's untouched file as the program it is.

Public API: ``regions(text, suffix)``, ``render(text, source_name, suffix)``, ``rendered(...)`` (the text and
its TODO blocks' lines), ``code_lines(text, suffix)``, ``fixed(text, source_name, suffix)``,
``fix_diff(text, source_name, suffix, shown)``, ``is_debug(exercise_id)``, ``plan(solutions)``,
``exercise_path(rel)``, ``source_name(spec)``, ``stub(spec)``, ``sync(solutions, exercises, backup=False)``,
``differences(solutions, exercises)``, ``renamed_work``, ``RegionError``, ``SolutionsError``, ``SOLUTIONS``,
``EXERCISES``, ``DEBUG``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import shutil
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..paths import REPO

ROOT = REPO
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
MANIFEST = ".manifest.json"

#: File kinds the generator understands → their line-comment prefix.
COMMENT = {".cu": "//", ".cuh": "//", ".cpp": "//", ".h": "//", ".hpp": "//", ".py": "#"}
#: What the id of a debugging exercise holds (``ch02_debug_vecmat``).
DEBUG = "_debug_"
#: Words no comment beside a buggy line may hold (they would point at it), and how near counts as beside.
_GIVEAWAY = re.compile(r"\b(bug|bugs|buggy|todo|fix|fixed|fixme|wrong)\b", re.IGNORECASE)
_NEAR = 3


def is_debug(exercise_id: str) -> bool:
    """Whether an exercise is a debugging exercise (a program with one bug to find): its id holds ``_debug_``."""
    return DEBUG in exercise_id.split("@", 1)[0]


class RegionError(ValueError):
    """A solution file's BEGIN/END SOLUTION (or BUG) markers do not pair up, or a bug region gives itself away."""


class SolutionsError(ValueError):
    """The solutions folder is missing or holds no solution: nothing can be generated from it."""


def _planned(solutions: Path) -> dict[str, tuple[str, str]]:
    """``plan(solutions)``, refusing a folder that is missing or yields no exercise."""
    if not solutions.is_dir():
        what = "is a file, not a folder" if solutions.exists() else "does not exist"
        raise SolutionsError(f"the solutions folder {solutions} {what}; nothing was changed (check --solutions)")
    planned = plan(solutions)
    if not planned:
        raise SolutionsError(f"{solutions} holds no solution file with BEGIN SOLUTION regions; nothing was "
                             "changed (regenerating from it would remove every unedited exercise)")
    return planned


@dataclass(frozen=True)
class Region:
    """One marked region: 1-based line numbers of its BEGIN and END markers, indent, hint, stub lines. A bug
    region (``bug``): ``body`` is the right lines, ``stub`` the buggy ones the exercise has instead."""

    begin: int
    end: int
    indent: str
    hint: str
    body: tuple[str, ...]
    stub: tuple[str, ...]
    code_lines: int  # lines of code in the solution (blank lines, comments and STUB lines do not count)
    bug: bool = False


def _is_code(line: str, prefix: str) -> bool:
    s = line.strip()
    comment = ("#",) if prefix == "#" else ("//", "/*", "*")
    return bool(s) and not s.startswith(comment)


def _indent(lines: list[str]) -> str | None:
    """The smallest indentation of the lines that are not blank (None: no such line)."""
    found = [ln[:len(ln) - len(ln.lstrip())] for ln in lines if ln.strip()]
    return min(found, key=len) if found else None


def code_lines(text: str, suffix: str) -> int:
    """How many lines of ``text`` hold code (not blank, not only a comment)."""
    return sum(_is_code(line, COMMENT[suffix]) for line in text.splitlines())


def _markers(prefix: str, kind: str = "SOLUTION") -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """BEGIN, END and the replacement line of a region of ``kind`` (SOLUTION: STUB lines; BUG: BUG lines)."""
    p = re.escape(prefix)
    begin = re.compile(rf"^(\s*){p}\s*BEGIN {kind}\b\s*(?:hint:\s*(.*?))?\s*$")
    end = re.compile(rf"^\s*{p}\s*END {kind}\b.*$")
    stub = re.compile(rf"^(\s*){p}\s*{'STUB' if kind == 'SOLUTION' else 'BUG'}:\s?(.*?)\s*$")
    return begin, end, stub


def regions(text: str, suffix: str, name: str = "<source>") -> list[Region]:
    """The marked regions of a solution, SOLUTION or BUG ones (a file holds one kind); raises RegionError (with the
    file and line) on unpaired markers, a region inside another, both kinds in one file, or a bug region whose
    buggy lines are the right ones."""
    if suffix not in COMMENT:
        return []
    prefix = COMMENT[suffix]
    kinds = {kind: _markers(prefix, kind) for kind in ("SOLUTION", "BUG")}
    found: list[Region] = []
    open_at: int | None = None
    kind, indent, hint = "", "", ""
    body: list[str] = []
    stub: list[str] = []
    for n, line in enumerate(text.splitlines(), start=1):
        began = next(((k, m) for k, (b, _, _) in kinds.items() if (m := b.match(line))), None)
        ended = next((k for k, (_, e, _) in kinds.items() if e.match(line)), None)
        if began:
            if open_at is not None:
                raise RegionError(f"{name}:{n}: BEGIN {began[0]} inside the region opened at line {open_at} ({kind})")
            if found and found[-1].bug != (began[0] == "BUG"):
                other = "BUG" if found[-1].bug else "SOLUTION"
                raise RegionError(f"{name}:{n}: BEGIN {began[0]} in a file with {other} regions: a file is an "
                                  "exercise (SOLUTION regions) or a debugging exercise (BUG regions), not both")
            kind, m = began
            open_at, indent, hint, body, stub = n, m.group(1), (m.group(2) or "").strip(), [], []
        elif ended:
            if open_at is None or ended != kind:
                raise RegionError(f"{name}:{n}: END {ended} without a BEGIN {ended}")
            if kind == "BUG" and [ln.strip() for ln in body] == [ln.strip() for ln in stub]:
                raise RegionError(f"{name}:{open_at}: the BUG region's buggy lines are its right lines: "
                                  "write the buggy version as '// BUG: <line>' lines (none: the right lines are "
                                  "missing from the exercise)")
            if kind == "BUG" and _indent(body) is not None and _indent(stub) not in (None, _indent(body)):
                raise RegionError(f"{name}:{open_at}: the BUG lines are indented {len(_indent(stub) or '')} "
                                  f"spaces, the right lines {len(_indent(body) or '')}: the exercise would show "
                                  "where the bug is (a BUG line is the comment's indent plus what follows 'BUG: ')")
            code = sum(_is_code(b, prefix) for b in body)
            found.append(Region(open_at, n, indent, hint, tuple(body), tuple(stub), code, kind == "BUG"))
            open_at = None
        elif open_at is not None:
            other = kinds["BUG" if kind == "SOLUTION" else "SOLUTION"][2]
            if other.match(line):
                raise RegionError(f"{name}:{n}: a {'BUG' if kind == 'SOLUTION' else 'STUB'} line inside a "
                                  f"{kind} region (STUB lines belong to SOLUTION regions, BUG lines to BUG ones)")
            if m := kinds[kind][2].match(line):
                stub.append(m.group(1) + m.group(2))
            else:
                body.append(line)
        elif any(r.match(line) for _, _, r in kinds.values()):
            raise RegionError(f"{name}:{n}: a STUB or BUG line outside any region")
    if open_at is not None:
        raise RegionError(f"{name}:{open_at}: BEGIN {kind} is never closed by END {kind}")
    return found


def header(source_name: str, suffix: str) -> str:
    """The first line of every generated file: says it is generated, and from which solution."""
    return f"{COMMENT[suffix]} GENERATED from {source_name} by `python -m tklab exercises`: fill in the TODOs."


def _debug_header(source_name: str, suffix: str, found: list[Region]) -> list[str]:
    """A debugging exercise's header: generated from where, what the learner is asked, what the program should do
    (the regions' hints), where the hints are. Nothing in it says where the bug is."""
    prefix = COMMENT[suffix]
    exercise_id = Path(source_name).name.split(".", 1)[0]
    out = [f"{prefix} GENERATED from {source_name} by `python -m tklab exercises`.",
           f"{prefix} DEBUGGING EXERCISE: this program has one bug. Check it as it is (tklab.check(\"{exercise_id}\")",
           f"{prefix} or python -m tklab check {exercise_id}), read what the verdict says it did, then find the bug",
           f"{prefix} and repair it."]
    goals = list(dict.fromkeys(r.hint for r in found if r.hint))
    for i, part in enumerate(textwrap.wrap("; ".join(goals), width=100 - len(prefix) - 1)):
        out.append(f"{prefix} {'What it should do: ' if i == 0 else '                   '}{part}")
    out.append(f'{prefix} Stuck? tklab.hint("{exercise_id}") in a notebook, or python -m tklab hint {exercise_id}.')
    return out


def render(text: str, source_name: str, suffix: str) -> str:
    """The exercise for one solution text: header line, regions replaced by TODO stubs (a debugging exercise: its
    header, each bug region's right lines replaced by its buggy ones)."""
    return rendered(text, source_name, suffix)[0]


def fixed(text: str, source_name: str, suffix: str) -> str:
    """A debugging exercise with its bug fixed: ``render``'s text with each bug region's right lines in place (the
    solution without its markers, under the exercise's header)."""
    return _rendered(text, source_name, suffix, fix=True)[0]


def fix_diff(text: str, source_name: str, suffix: str, shown: str) -> str:
    """The fix of a debugging exercise as a unified diff of its file (``shown``: the file's name in the diff's
    headers), two lines of context: what the hint's level 3 shows."""
    given = render(text, source_name, suffix).splitlines(keepends=True)
    right = fixed(text, source_name, suffix).splitlines(keepends=True)
    return "".join(difflib.unified_diff(given, right, f"{shown} (as given)", f"{shown} (fixed)", n=2))


def rendered(text: str, source_name: str, suffix: str) -> tuple[str, list[tuple[int, int]]]:
    """``render``'s text, and where each region's TODO block is in it: (first, last) line, 1-based (the TODO
    and Goal comments, the hints line, the STUB lines or ``pass``): where the learner writes. A debugging
    exercise has no TODO block (its list is empty): the learner may change any line."""
    return _rendered(text, source_name, suffix)


def _rendered(text: str, source_name: str, suffix: str, *, fix: bool = False) -> tuple[str, list[tuple[int, int]]]:
    prefix = COMMENT[suffix]
    blocks: list[tuple[int, int]] = []
    lines = text.splitlines()
    found = regions(text, suffix, source_name)
    exercise_id = Path(source_name).name.split(".", 1)[0]
    debug = bool(found) and found[0].bug
    if debug and not is_debug(exercise_id):
        raise RegionError(f"{source_name}:{found[0].begin}: BUG regions make a debugging exercise, whose id holds "
                          f"{DEBUG!r} ({exercise_id!r} does not)")
    out = _debug_header(source_name, suffix, found) if debug else [header(source_name, suffix)]
    buggy: list[int] = []  # where the buggy lines are in the exercise (a line's neighbours, if it has none)
    pos = 0
    for k, r in enumerate(found):
        out.extend(lines[pos:r.begin - 1])
        pos = r.end
        if r.bug:
            buggy.extend(range(len(out) + 1, len(out) + 1 + max(1, len(r.stub))))
            out.extend(r.body if fix else r.stub)
            continue
        n = r.code_lines
        first = len(out) + 1
        out.append(f"{r.indent}{prefix} TODO: your code here (about {n} line{'s' if n != 1 else ''}).")
        width = max(40, 100 - len(r.indent))
        if r.hint:  # wrapped, so a long goal stays readable (and within a linter's line length)
            for i, part in enumerate(textwrap.wrap(r.hint, width=width)):
                out.append(f"{r.indent}{prefix} {'Goal: ' if i == 0 else '      '}{part}")
        if k == 0:
            out.append(f'{r.indent}{prefix} Stuck? tklab.hint("{exercise_id}") in a notebook, or '
                       f"python -m tklab hint {exercise_id}.")
        if r.stub:
            out.extend(r.stub)
        elif suffix == ".py":
            out.append(f"{r.indent}pass")
        blocks.append((first, len(out)))
    out.extend(lines[pos:])
    if debug and not fix:
        _no_giveaway(out, buggy, len(_debug_header(source_name, suffix, found)), source_name, found)
    return "\n".join(out) + "\n", blocks


def _no_giveaway(out: list[str], buggy: list[int], header_lines: int, source_name: str, found: list[Region]) -> None:
    """Refuse a debugging exercise whose text points at its bug: a word such as BUG, TODO or fix within a few lines
    of a buggy line (the header aside), a line the generator left behind."""
    for at in buggy:
        for n in range(max(header_lines + 1, at - _NEAR), min(len(out), at + _NEAR) + 1):
            if m := _GIVEAWAY.search(out[n - 1]):
                region = next((r for r in found if r.bug), found[0])
                raise RegionError(f"{source_name}:{region.begin}: the exercise's line {n} says {m.group(0)!r} "
                                  f"near the bug (line {at}): it would point at it; reword it")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def plan(solutions: Path = SOLUTIONS) -> dict[str, tuple[str, str]]:
    """{exercise path relative to exercises/: (solution path shown in the header, generated text)}.

    Every solution file with at least one region yields an exercise at ``exercise_path`` (an exercise folder's
    solution at the top of ``exercises/``, a drill at its own relative path); files without regions (a spec, a
    chapter's kernel) are not exercises and are skipped.
    """
    result: dict[str, tuple[str, str]] = {}
    if not solutions.is_dir():
        return result
    for path in sorted(solutions.rglob("*")):
        if not path.is_file() or path.suffix not in COMMENT or "__pycache__" in path.parts:
            continue
        rel = exercise_path(path.relative_to(solutions))
        text = path.read_text()
        shown = f"{solutions.name}/{path.relative_to(solutions).as_posix()}"  # the solution's own path
        if regions(text, path.suffix, shown):
            result[rel] = (shown, render(text, shown, path.suffix))
    return result


def exercise_path(rel: Path) -> str:
    """Where the exercise generated from a solution file goes, relative to ``exercises/`` (``rel``: the solution's
    path relative to ``solutions/``): an exercise folder's solution, a file named after its folder
    (``ch02_smem_tiling/ch02_smem_tiling.cu``), as its name (``ch02_smem_tiling.cu``); any other file at its own path
    (``drills/ch04_padding.py``). Its header names the solution it came from (``source_name``)."""
    if len(rel.parts) == 2 and rel.name.split(".", 1)[0] == rel.parts[0]:
        return rel.name
    return rel.as_posix()


def source_name(spec: Any) -> str:
    """The name a generated exercise gives its solution in its header, as ``plan`` names it: the solution's path
    under ``solutions/`` (``solutions/ch02_smem_tiling/ch02_smem_tiling.cu``, ``solutions/drills/ch04_padding.py``),
    wherever the registry's folder of exercises is."""
    path = Path(spec.solution)
    if path.parent.name == spec.id.split("@", 1)[0]:  # an exercise's folder
        return f"{SOLUTIONS.name}/{path.parent.name}/{path.name}"
    return f"{SOLUTIONS.name}/{spec.exercise_file}"


def stub(spec: Any) -> str:
    """The learner's starting file for ``spec``: exactly what ``plan`` generates from its solution."""
    path = ROOT / spec.solution
    return render(path.read_text(), source_name(spec), path.suffix)


def _load_manifest(exercises: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads((exercises / MANIFEST).read_text())
        return dict(data.get("files", {}))
    except (OSError, ValueError):
        return {}


def _manifest_text(planned: dict[str, tuple[str, str]]) -> str:
    files = {rel: {"from": src, "sha256": _sha(text.encode())} for rel, (src, text) in sorted(planned.items())}
    return json.dumps({"generated_by": "python -m tklab exercises", "files": files}, indent=1) + "\n"


#: Exercise files renamed to their exercise's id: old name → (new name, SHA-256 of every version the
#: generator wrote under the old name: such a file holds none of the learner's work).
RENAMED_FILES: dict[str, tuple[str, frozenset[str]]] = {
    "flash_fwd_hopper.cu": ("ch10_flash.cu", frozenset({
        "796e53463785b140916ebe73c767d7070a736cde8cd212f344e7a07bb012d0f8",
        "eb5fdb61d29a49826ebd4aa479db39dd13b8fccebc166bd1eabcd599ec0198d9",
        "cca9c5bbc089f5655b4e643e7252516fa31819c16cf8f3bd794c6421c7345a46",
        "cd033ab60164b251d9ebbb7d5b53db9b40ccb1b1b9c781b51d2fa478ca8f0851"})),
    "flash_fwd_tiles.cu": ("ch09_flash.cu", frozenset({
        "315bb50b688881e288b08110b3dc4443574966313cbf464a3986cbe4a4eeccbe",
        "ac57184f8b3a439204cd6f4c0dc200820eb5a0fd4399afe05252a540e2e5b4be",
        "294c71c007a9cf879869c490a149088d295edde13c151c7f8d6188fc0aaa89e0"})),
}


def renamed_work(exercises: Path = EXERCISES) -> list[tuple[str, str]]:
    """(old, new) for every old-name exercise file that holds the learner's work (not a generated copy)."""
    out = []
    for old, (new, generated) in RENAMED_FILES.items():
        path = exercises / old
        if path.is_file() and not path.is_symlink() and _sha(path.read_bytes()) not in generated:
            out.append((old, new))
    return out


@dataclass
class SyncReport:
    """What ``sync`` did (or, when ``edited`` is non-empty and no backup was asked for, refused to do)."""

    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    edited: list[str] = field(default_factory=list)
    backups: dict[str, str] = field(default_factory=dict)
    kept_stale: list[str] = field(default_factory=list)
    migrated: dict[str, str] = field(default_factory=dict)  # old name → new name the learner's work moved to
    kept_renamed: dict[str, str] = field(default_factory=dict)  # old name kept: the new name holds work too

    @property
    def refused(self) -> bool:
        return bool(self.edited) and not self.backups


def sync(solutions: Path = SOLUTIONS, exercises: Path = EXERCISES, *, backup: bool = False,
         stamp: str | None = None) -> SyncReport:
    """Regenerate ``exercises`` from ``solutions`` without losing a learner's edits (see module doc).

    If some file was edited since it was generated, nothing is written (``report.refused``) unless
    ``backup`` is true, in which case each edited file is first copied to ``<name>.bak-<stamp>``.
    """
    planned = _planned(solutions)
    manifest = _load_manifest(exercises)
    report = SyncReport()
    _migrate(planned, manifest, exercises, report)
    to_write: dict[str, str] = {}
    for rel, (_src, text) in planned.items():
        dest = exercises / rel
        if not dest.exists():
            to_write[rel] = text
            continue
        current = dest.read_bytes()
        if current == text.encode():
            report.unchanged.append(rel)
            continue
        sha = _sha(current)
        generated_before = {h for new, hashes in RENAMED_FILES.values() if new == rel for h in hashes}
        if manifest.get(rel, {}).get("sha256") != sha and sha not in generated_before:
            report.edited.append(rel)
        to_write[rel] = text
    stale = [rel for rel in manifest if rel not in planned and (exercises / rel).exists()]
    for rel in stale:
        if _sha((exercises / rel).read_bytes()) == manifest[rel].get("sha256"):
            report.removed.append(rel)
        else:
            report.kept_stale.append(rel)
    if report.edited and not backup:
        return report
    stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
    for rel in report.edited:
        dest = exercises / rel
        bak = dest.with_name(f"{dest.name}.bak-{stamp}")
        shutil.copy2(dest, bak)
        report.backups[rel] = bak.relative_to(exercises).as_posix()
    for rel, text in to_write.items():
        dest = exercises / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
        report.written.append(rel)
    for rel in report.removed:
        (exercises / rel).unlink(missing_ok=True)
    exercises.mkdir(parents=True, exist_ok=True)
    (exercises / MANIFEST).write_text(_manifest_text(planned))
    return report


def _migrate(planned: dict[str, tuple[str, str]], manifest: dict[str, dict[str, str]], exercises: Path,
             report: SyncReport) -> None:
    """Old-name files: the learner's work moves to the new name (when that holds none), generated copies go."""
    work = dict(renamed_work(exercises))
    for old, (new, _generated) in RENAMED_FILES.items():
        src, dest = exercises / old, exercises / new
        if not src.is_file() or src.is_symlink():
            continue
        if old not in work:
            src.unlink()
            report.removed.append(old)
            continue
        fresh = not dest.exists() or (new in planned and dest.read_bytes() == planned[new][1].encode()) or \
            _sha(dest.read_bytes()) == manifest.get(new, {}).get("sha256")
        if fresh:
            src.replace(dest)
            report.migrated[old] = new
        else:
            report.kept_renamed[old] = new


def differences(solutions: Path = SOLUTIONS, exercises: Path = EXERCISES) -> list[str]:
    """Why ``exercises`` is not exactly what ``solutions`` generate (empty list: in sync)."""
    planned = _planned(solutions)
    problems = []
    for rel, (src, text) in planned.items():
        dest = exercises / rel
        if not dest.exists():
            problems.append(f"{rel}: missing (generated from {src})")
        elif dest.read_bytes() != text.encode():
            problems.append(f"{rel}: differs from what {src} generates")
    for rel in _load_manifest(exercises):
        if rel not in planned and (exercises / rel).exists():
            problems.append(f"{rel}: generated earlier, but no solution generates it any more")
    manifest = exercises / MANIFEST
    if planned and (not manifest.exists() or manifest.read_text() != _manifest_text(planned)):
        problems.append(f"{MANIFEST}: out of date")
    return problems
