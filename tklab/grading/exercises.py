"""Solutions → exercises: the learner's copy is generated from the complete solution, never hand-written.

A file in ``solutions/`` marks the parts a learner writes::

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

``python -m tklab exercises --list`` prints the index of every exercise and drill (chapter, concept,
size, whether it runs without a GPU), read from the registry (``tklab.grading.specs``);
``--index`` writes the same table into ``notebooks/README.md``, with the table of chapters above it (every
notebook: the number and title of its first heading, what it teaches from ``TOPICS``); a test holds the
README equal to what the generator writes.

Public API: ``regions(text, suffix)``, ``render(text, source_name, suffix)``, ``rendered(...)`` (the text and
its TODO blocks' lines), ``plan(solutions)``,
``sync(solutions, exercises, backup=False)``, ``differences(solutions, exercises)``, ``renamed_work``,
``index_rows()``, ``index_table()``, ``chapter_rows()``, ``chapter_table()``, ``readme_with_index(text)``,
``main(argv)``, ``RegionError``,
``SolutionsError``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import REPO

ROOT = REPO
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
MANIFEST = ".manifest.json"

#: File kinds the generator understands → their line-comment prefix.
COMMENT = {".cu": "//", ".cuh": "//", ".cpp": "//", ".h": "//", ".hpp": "//", ".py": "#"}


class RegionError(ValueError):
    """A solution file's BEGIN/END SOLUTION markers do not pair up."""


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
    """One marked region: 1-based line numbers of its BEGIN and END markers, indent, hint, stub lines."""

    begin: int
    end: int
    indent: str
    hint: str
    body: tuple[str, ...]
    stub: tuple[str, ...]
    code_lines: int  # lines of code in the solution (blank lines, comments and STUB lines do not count)


def _is_code(line: str, prefix: str) -> bool:
    s = line.strip()
    comment = ("#",) if prefix == "#" else ("//", "/*", "*")
    return bool(s) and not s.startswith(comment)


def _markers(prefix: str) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    p = re.escape(prefix)
    begin = re.compile(rf"^(\s*){p}\s*BEGIN SOLUTION\b\s*(?:hint:\s*(.*?))?\s*$")
    end = re.compile(rf"^\s*{p}\s*END SOLUTION\b.*$")
    stub = re.compile(rf"^(\s*){p}\s*STUB:\s?(.*?)\s*$")
    return begin, end, stub


def regions(text: str, suffix: str, name: str = "<source>") -> list[Region]:
    """The marked regions of a solution; raises RegionError (with the line) on unpaired markers."""
    if suffix not in COMMENT:
        return []
    begin_re, end_re, stub_re = _markers(COMMENT[suffix])
    found: list[Region] = []
    open_at: int | None = None
    indent, hint = "", ""
    body: list[str] = []
    stub: list[str] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if m := begin_re.match(line):
            if open_at is not None:
                raise RegionError(f"{name}:{n}: BEGIN SOLUTION inside the region opened at line {open_at}")
            open_at, indent, hint, body, stub = n, m.group(1), (m.group(2) or "").strip(), [], []
        elif end_re.match(line):
            if open_at is None:
                raise RegionError(f"{name}:{n}: END SOLUTION without a BEGIN SOLUTION")
            code = sum(_is_code(b, COMMENT[suffix]) for b in body)
            found.append(Region(open_at, n, indent, hint, tuple(body), tuple(stub), code))
            open_at = None
        elif open_at is not None:
            if m := stub_re.match(line):
                stub.append(m.group(1) + m.group(2))
            else:
                body.append(line)
    if open_at is not None:
        raise RegionError(f"{name}:{open_at}: BEGIN SOLUTION is never closed by END SOLUTION")
    return found


def header(source_name: str, suffix: str) -> str:
    """The first line of every generated file: says it is generated, and from which solution."""
    return f"{COMMENT[suffix]} GENERATED from {source_name} by `python -m tklab exercises`: fill in the TODOs."


def render(text: str, source_name: str, suffix: str) -> str:
    """The exercise for one solution text: header line, regions replaced by TODO stubs."""
    return rendered(text, source_name, suffix)[0]


def rendered(text: str, source_name: str, suffix: str) -> tuple[str, list[tuple[int, int]]]:
    """``render``'s text, and where each region's TODO block is in it: (first, last) line, 1-based (the TODO
    and Goal comments, the hints line, the STUB lines or ``pass``): where the learner writes."""
    prefix = COMMENT[suffix]
    blocks: list[tuple[int, int]] = []
    lines = text.splitlines()
    out = [header(source_name, suffix)]
    exercise_id = Path(source_name).name.split(".", 1)[0]
    pos = 0
    for k, r in enumerate(regions(text, suffix, source_name)):
        out.extend(lines[pos:r.begin - 1])
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
        pos = r.end
    out.extend(lines[pos:])
    return "\n".join(out) + "\n", blocks


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def plan(solutions: Path = SOLUTIONS) -> dict[str, tuple[str, str]]:
    """{exercise path relative to exercises/: (solution path shown in the header, generated text)}.

    Every solution file with at least one region yields an exercise of the same relative path; files
    without regions are not exercises (yet) and are skipped.
    """
    result: dict[str, tuple[str, str]] = {}
    if not solutions.is_dir():
        return result
    for path in sorted(solutions.rglob("*")):
        if not path.is_file() or path.suffix not in COMMENT or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(solutions).as_posix()
        text = path.read_text()
        shown = f"{solutions.name}/{rel}"
        if regions(text, path.suffix, shown):
            result[rel] = (shown, render(text, shown, path.suffix))
    return result


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


# ---- the index: every exercise and drill, from the registry --------------------------------------------

README = ROOT / "notebooks" / "README.md"
INDEX_BEGIN = "<!-- exercise index: generated from the registry by `python -m tklab exercises --index` -->"
INDEX_END = "<!-- end of the exercise index -->"


@dataclass(frozen=True)
class IndexRow:
    """One exercise or drill as the index shows it."""

    chapter: str
    id: str
    kind: str
    concept: str
    lines: int  # lines of code the learner writes (the solution's marked regions)
    without_gpu: str
    file: str  # relative to exercises/


def index_rows() -> list[IndexRow]:
    """Every exercise and drill in the registry, in chapter order."""
    from . import hints, specs

    rows = []
    for i in specs.all_ids():
        spec = specs.get(i)
        path = ROOT / spec.solution
        lines = sum(r.code_lines for r in regions(path.read_text(), path.suffix, spec.solution))
        rows.append(IndexRow(spec.chapter, i, spec.kind, hints.ladder(i).concept, lines, spec.without_gpu,
                             spec.exercise_file))
    return rows


def index_table(link_prefix: str = "../exercises/") -> str:
    """The index as a Markdown table (links relative to ``notebooks/``)."""
    out = ["| ch | exercise | kind | concept | you write | without a GPU |", "|---|---|---|---|---|---|"]
    for r in index_rows():
        out.append(f"| {r.chapter} | [`{r.id}`]({link_prefix}{r.file}) | {r.kind} | {r.concept} | "
                   f"{r.lines} line{'s' if r.lines != 1 else ''} | {r.without_gpu} |")
    return "\n".join(out) + "\n"


# ---- the chapters: every notebook, its number and title from its first heading -------------------------

CHAPTERS_BEGIN = "<!-- chapter index: generated from the notebooks by `python -m tklab exercises --index` -->"
CHAPTERS_END = "<!-- end of the chapter index -->"

#: What each notebook teaches, as the workbook's index says it (its number and title are the notebook's own
#: first heading). A notebook without a line here stops ``--index`` and fails ``tests/test_index.py``.
TOPICS = {
    "00_the_machine": "SMs, quadrants, registers, shared memory, L2, HBM; datasheet vs measured ceilings; the "
                      "roofline; compiling, reading SASS and timing with tklab",
    "01_naive_matmul": "grid, blocks, threads, warps; indexing and bounds; numba.cuda, also on the CPU",
    "02_coalescing_tiling": "32-byte sectors and coalesced access; CUDA C in `%%tk` cells; shared-memory tiles and "
                            "`__syncthreads()`; `LDS`/`STS`/`BAR` in SASS",
    "03_register_blocking": "outer products in registers; `float4` loads (`LDG.E.128`, `LDS.128`); FFMA density; "
                            "registers → occupancy; spills",
    "04_banks_swizzling": "shared-memory banks, conflicts, padding vs XOR swizzle",
    "05_tensor_cores_mma": "fragments, `ldmatrix`, `mma.sync`, a bf16 GEMM",
    "06_tile_library": "register/shared/global tiles, warp ops, a cp.async pipeline, what Hopper adds",
    "07_tma_pipelines": "a copy three ways (per thread, `cp.async`, TMA) against the copy ceiling; mbarrier phases "
                        "and parity; a ring of stages as a timeline (model and explorer) and measured, and why more "
                        "stages stop helping",
    "08_wgmma_gemm": "wgmma descriptors and the accumulate flag (serialized wgmma, C7514/C7515); one warpgroup → "
                     "producer/consumer warpgroups with `setmaxnreg` → persistent grid with a TMA-store epilogue → "
                     "L2 tile order → 2-block clusters with TMA multicast, each measured against cuBLAS; shapes "
                     "that are not tile multiples",
    "09_flash_attention": "attention's bytes; the online softmax (exact, checked in NumPy); the kernel tile by tile "
                          "(mma.sync, ldmatrix, cp.async); causal block skipping with an explorer and a traffic "
                          "model against Nsight Compute's bytes; measured against PyTorch's FlashAttention-2 and "
                          "cuDNN",
    "10_hopper_flash_attention": "TMA, wgmma and rank-4 tensor maps; producer and consumer warpgroups, "
                                 "`setmaxnreg`; a model of warpgroup schedules (plain, overlapped, ping-pong) beside "
                                 "the measured progression; every configuration against cuDNN; the course's results "
                                 "table",
    "11_flash_attention_backward": "the backward from the forward's log-sum-exp; five products per block, two "
                                   "with a transposed operand read from shared memory; dQ added into by many "
                                   "blocks (TMA reduce-add); measured against cuDNN and FlashAttention-4",
    "layout_playground": "every explorer (banks, fragments, swizzles, TMA boxes) in one place",
}


@dataclass(frozen=True)
class ChapterRow:
    """One notebook as the workbook's index shows it."""

    number: str  # "00" … , "—" for a notebook outside the sequence (the playground)
    title: str
    file: str  # relative to notebooks/
    topics: str


def chapter_rows(notebooks: Path | None = None) -> list[ChapterRow]:
    """Every notebook in ``notebooks/``: the numbered chapters in order, then the others."""
    folder = notebooks or README.parent
    rows = []
    for nb in sorted(folder.glob("*.ipynb"), key=lambda p: (not p.name[:2].isdigit(), p.name)):
        cells = json.loads(nb.read_text())["cells"]
        first = "".join(cells[0]["source"]).splitlines()[0] if cells else ""
        if not first.startswith("# "):
            raise ValueError(f"{nb.name}: its first cell does not start with a '# ' heading (the index's title)")
        number, sep, title = first[2:].partition(" · ")
        if not sep:
            number, title = "—", first[2:]
        if nb.stem not in TOPICS:
            raise ValueError(f"{nb.name} has no line in the workbook's index: add what it teaches to TOPICS in "
                             "tklab/grading/exercises.py")
        rows.append(ChapterRow(number.strip(), title.strip(), nb.name, TOPICS[nb.stem]))
    return rows


def chapter_table(notebooks: Path | None = None) -> str:
    """The chapters as a Markdown table (links relative to ``notebooks/``)."""
    out = ["| # | notebook | what you learn |", "|---|---|---|"]
    out += [f"| {r.number} | [{r.title}]({r.file}) | {r.topics} |" for r in chapter_rows(notebooks)]
    return "\n".join(out) + "\n"


def _between(text: str, begin: str, end: str, table: str) -> str:
    if begin not in text or end not in text:
        raise ValueError(f"the README has no index markers ({begin} … {end})")
    head, rest = text.split(begin, 1)
    _old, tail = rest.split(end, 1)
    return f"{head}{begin}\n{table}{end}{tail}"


def readme_with_index(text: str) -> str:
    """``text`` (notebooks/README.md) with the tables between the index markers regenerated: the chapters
    (from the notebooks) and the exercises and drills (from the registry)."""
    text = _between(text, CHAPTERS_BEGIN, CHAPTERS_END, chapter_table())
    return _between(text, INDEX_BEGIN, INDEX_END, index_table())


def _print_list() -> None:
    rows = index_rows()
    for r in rows:
        size = f"{r.lines} line{'s' if r.lines != 1 else ''}"
        print(f"{r.chapter}  {r.id:<24} {r.kind:<8} {size:>9}  without a GPU: {r.without_gpu:<18} {r.concept}")
    drills = sum(r.kind == "drill" for r in rows)
    print(f"{len(rows)} in all: {len(rows) - drills} exercises, {drills} drills; files in exercises/; "
          "check one with tklab.check(\"ID\") or python -m tklab check ID; hints: python -m tklab hint ID")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tklab exercises [--check] [--backup] [--list] [--index]``: regenerate exercises/, verify
    it, or show / write the index."""
    ap = argparse.ArgumentParser(prog="python -m tklab exercises", description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if exercises/ differs from what solutions/ "
                    "generate (for CI); writes nothing")
    ap.add_argument("--backup", action="store_true", help="copy edited exercise files to <name>.bak-<time> "
                    "and regenerate them")
    ap.add_argument("--list", action="store_true", help="print every exercise and drill (chapter, concept, "
                    "size, whether it runs without a GPU) and write nothing")
    ap.add_argument("--index", action="store_true", help="write that index, and the chapters', into "
                    "notebooks/README.md")
    ap.add_argument("--solutions", type=Path, default=SOLUTIONS, help="folder of complete solutions")
    ap.add_argument("--exercises", type=Path, default=EXERCISES, help="folder of generated exercises")
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.list:
        _print_list()
        return 0
    if args.index:
        README.write_text(readme_with_index(README.read_text()))
        print(f"wrote the index of {len(chapter_rows())} notebooks and {len(index_rows())} exercises and drills "
              f"into {README}")
        return 0
    try:
        if args.check:
            problems = differences(args.solutions, args.exercises)
            for p in problems:
                print(f"  {args.exercises.name}/{p}")
            if problems:
                print(f"{len(problems)} problem(s): run `python -m tklab exercises` to regenerate.")
                return 1
            print(f"{args.exercises} is up to date with {args.solutions} ({len(plan(args.solutions))} files).")
            return 0
        report = sync(args.solutions, args.exercises, backup=args.backup)
    except (RegionError, SolutionsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for old, new in report.migrated.items():
        print(f"moved your work from {args.exercises / old} to {args.exercises / new} (the exercise was renamed "
              "after its id)")
    for old, new in report.kept_renamed.items():
        print(f"kept {args.exercises / old}: it holds your work, and so does {args.exercises / new} (the "
              "exercise's new name); merge them by hand")
    if report.refused:
        print("Not regenerating: these exercise files were edited since they were generated "
              "(your work is in them):", file=sys.stderr)
        for rel in report.edited:
            print(f"  {args.exercises / rel}", file=sys.stderr)
        print("Run again with --backup to copy them aside (<name>.bak-<time>) and regenerate.", file=sys.stderr)
        return 1
    for rel, bak in report.backups.items():
        print(f"backed up edited {args.exercises / rel} → {args.exercises / bak}")
    for rel in report.written:
        print(f"wrote {args.exercises / rel}")
    for rel in report.removed:
        print(f"removed {args.exercises / rel} (its solution is gone)")
    for rel in report.kept_stale:
        print(f"kept {args.exercises / rel}: edited, and no solution generates it any more")
    print(f"{len(report.written)} written, {len(report.unchanged)} unchanged.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
