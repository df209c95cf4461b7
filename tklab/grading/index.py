"""The workbook's index, and ``python -m tklab exercises``.

``--list`` prints every exercise and drill (chapter, kind, concept, size, whether it runs without a GPU), read from the
registry (``tklab.grading.specs``); ``--index`` writes the same table into ``notebooks/README.md``, with the table
of chapters above it (every notebook: the number and title of its first heading, what it teaches from ``TOPICS``);
a test holds the README equal to what the generator writes. Without either, it regenerates ``exercises/`` from
``solutions/`` (``tklab.grading.exercises.sync``: never over a learner's edits), or verifies it (``--check``: also
that each solution derived from a chapter's kernel is what its patch makes, ``tklab.grading.derived``). ``--derive``
writes those solutions from their kernels and patches; ``--repatch`` writes the patches from the solutions.

Public API: ``index_rows()``, ``index_table()``, ``chapter_rows()``, ``chapter_table()``, ``readme_with_index(text)``,
``main(argv)``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import cases, derived
from .exercises import (
    EXERCISES,
    ROOT,
    SOLUTIONS,
    RegionError,
    SolutionsError,
    code_lines,
    differences,
    plan,
    regions,
    stub,
    sync,
)

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
    lines: int  # lines of code the learner writes (the solution's marked regions); debug: the program's code lines
    without_gpu: str
    file: str  # relative to exercises/


def index_rows() -> list[IndexRow]:
    """Every exercise and drill in the registry, in chapter order."""
    from . import hints, specs

    rows = []
    for i in specs.all_ids():
        spec = specs.get(i)
        path = ROOT / spec.solution
        found = regions(path.read_text(), path.suffix, spec.solution)
        lines = sum(r.code_lines for r in found)
        if spec.kind == "debug":  # the size of a debugging exercise is the program to search
            lines = code_lines(stub(spec), path.suffix)
        rows.append(IndexRow(spec.chapter, i, spec.kind, hints.ladder(i).concept, lines, cases.without_gpu(spec),
                             spec.exercise_file))
    return rows


def size(row: IndexRow) -> str:
    """What the learner does, in a few words: the lines to write, or the bug to find in a program of N lines."""
    if row.kind == "debug":
        return f"find 1 bug in {row.lines} lines"
    return f"{row.lines} line{'s' if row.lines != 1 else ''}"


def index_table(link_prefix: str = "../exercises/") -> str:
    """The index as a Markdown table (links relative to ``notebooks/``)."""
    out = ["| ch | exercise | kind | concept | you write | without a GPU |", "|---|---|---|---|---|---|"]
    for r in index_rows():
        out.append(f"| {r.chapter} | [`{r.id}`]({link_prefix}{r.file}) | {r.kind} | {r.concept} | {size(r)} | "
                   f"{r.without_gpu} |")
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
        print(f"{r.chapter}  {r.id:<24} {r.kind:<8} {size(r):>22}  without a GPU: {r.without_gpu:<18} {r.concept}")
    drills, debug = sum(r.kind == "drill" for r in rows), sum(r.kind == "debug" for r in rows)
    print(f"{len(rows)} in all: {len(rows) - drills - debug} exercises, {debug} debugging exercises, {drills} "
          "drills; files in exercises/; check one with tklab.check(\"ID\") or python -m tklab check ID; hints: "
          "python -m tklab hint ID")


#: ``python -m tklab exercises``'s switches and what each does.
FLAGS = {
    "--check": "fail if exercises/ differs from what solutions/ generate (for CI); writes nothing",
    "--backup": "copy edited exercise files to <name>.bak-<time> and regenerate them",
    "--list": "print every exercise and drill (chapter, concept, size, whether it runs without a GPU) and write "
              "nothing",
    "--index": "write that index, and the chapters', into notebooks/README.md",
    "--derive": "write each solution derived from a chapter's kernel (solutions/<id>/<id>.patch) from the kernel and "
                "its patch",
    "--repatch": "write each such patch from its solution as it is now (after editing the solution by hand)",
}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tklab exercises [--check] [--backup] [--list] [--index] [--derive] [--repatch]``: regenerate
    exercises/, verify it, show / write the index, or write the derived solutions / their patches."""
    ap = argparse.ArgumentParser(prog="python -m tklab exercises", description=__doc__.split("\n")[0])
    for flag, what in FLAGS.items():
        ap.add_argument(flag, action="store_true", help=what)
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
        if args.derive or args.repatch:
            done = derived.write(args.solutions) if args.derive else derived.repatch(args.solutions)
            for rel in done:
                print(f"wrote {args.solutions / rel}")
            print(f"{len(done)} written.")
            return 0
        if args.check:
            problems = differences(args.solutions, args.exercises)
            for p in problems:
                print(f"  {args.exercises.name}/{p}")
            stale = derived.problems(args.solutions)
            for p in stale:
                print(f"  {args.solutions.name}/{p}")
            if stale:
                print(f"{len(stale)} derived solution(s) out of date: see above.")
                return 1
            if problems:
                print(f"{len(problems)} problem(s): run `python -m tklab exercises` to regenerate.")
                return 1
            print(f"{args.exercises} is up to date with {args.solutions} ({len(plan(args.solutions))} files).")
            return 0
        report = sync(args.solutions, args.exercises, backup=args.backup)
    except (RegionError, SolutionsError, derived.PatchError) as e:
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
