"""No answer lies where a learner looks. Every answer line of every exercise and drill (``tklab.grading.spoilers``:
the code of a solution's marked regions, whitespace-normalised, lines that say nothing beyond syntax dropped) is
searched in every text file of the library (``cuda/``), the package (``tklab/``), the tests (``tests/``, data
included), the benches (``bench/``), the documents (``docs/``, ``README.md``) and the learner's folder
(``exercises/``); none may hold it. ``solutions/`` is where answers live, and an exercise's own file is
``tests/test_spoilers.py``'s business (what its TODOs may keep), as are the notebooks.

The exceptions, each narrow, each with a test that a leak planted past it is still caught:

* A line an earlier chapter's exercise gives as code is taught, not an answer: chapter 07's ring hands a stage back
  with ``pipe.release`` in its given code, so chapter 08's design exercise, which must write that call too, gives
  nothing away when it appears elsewhere. Only an *earlier* chapter teaches: chapter 10's kernel may not hold
  chapter 09's update, which chapter 09's exercise asks for.
* A library header may hold an exercise's answer only where the learner cannot meet it before the exercise: the
  exercise's file cannot include it (its ``#include "..."`` graph, resolved beside each file and on ``cuda/``, does
  not reach it) and no notebook names it before the exercise (its file name, or a type it defines: ``pipeline<``,
  ``ring_cursor``) -- chapter 07 asks for the ring's protocol from bare barriers before it shows ``pipeline<>``.
  Both are checked, for each header and each answer it holds.
* ``KNOWN``: the leaks not fixed yet, each with its reason. The list only shrinks: an entry whose file no longer
  holds that exercise's answer fails the test until it is removed.

Links: no notebook cell up to an exercise's check, and no exercise file, links a file that holds its answer (its
solution folder, its ``planted.toml``).
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tklab.grading import specs, spoilers

ROOT = Path(__file__).resolve().parent.parent
SCANNED_DIRS = ("cuda", "tklab", "tests", "bench", "docs", "exercises")
SCANNED_FILES = ("README.md",)
SKIPPED_PARTS = {"__pycache__", ".pytest_cache", ".ipynb_checkpoints"}
IDS = specs.all_ids()
CHAPTERS = {p.name[:2]: p for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))}

#: (file, exercise) -> why its answer is still there. Only shrinks (test_known_leaks_are_still_there).
KNOWN: dict[tuple[str, str], str] = {}


def _text(path: Path) -> str | None:
    """The file's text, or None for a binary file (a NUL byte, or not UTF-8)."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


@functools.cache
def _ignored(root: Path) -> tuple[str, ...]:
    """The scanned paths git ignores under ``root`` (root-relative; a folder ends in ``/``): a checkout's scratch,
    such as a benchmark's copy of the tree in ``bench/_base/``, which no clone holds. None outside a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "--others", "--ignored", "--exclude-standard",
                              "--directory", "--", *SCANNED_DIRS, *SCANNED_FILES],
                             capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if out.returncode != 0 or not (root / ".git").exists():
        return ()
    return tuple(line for line in out.stdout.splitlines() if line)


def _is_ignored(rel: str, ignored: tuple[str, ...]) -> bool:
    return any(rel == e or (e.endswith("/") and (rel + "/").startswith(e)) for e in ignored)


def _files(root: Path) -> list[Path]:
    ignored = _ignored(root)
    out = [root / f for f in SCANNED_FILES if (root / f).is_file()]
    for d in SCANNED_DIRS:
        out += [p for p in sorted((root / d).rglob("*")) if p.is_file() and not SKIPPED_PARTS & set(p.parts)]
    return [p for p in out if not _is_ignored(p.relative_to(root).as_posix(), ignored)]


@functools.cache
def _answers(exercise: str) -> dict[str, str]:
    """The exercise's answer lines less those an earlier chapter's exercise gives as code (taught, not answers)."""
    spec = specs.get(exercise)
    taught: set[str] = set()
    for other in IDS:
        if specs.get(other).chapter < spec.chapter:
            taught |= spoilers.given_lines(specs.get(other))
    return {code: line for code, line in spoilers.answer_lines(spec).items() if code not in taught}


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def _reach(start: Path, root: Path) -> set[Path]:
    """Every file the ``#include "..."`` graph of ``start`` reaches (beside the including file, then ``cuda/``),
    whatever the preprocessor conditions around them (a header reachable under any -D is reachable)."""
    seen: set[Path] = set()
    todo = [start]
    while todo:
        f = todo.pop()
        for name in _INCLUDE.findall(f.read_text()):
            for base in (f.parent, root / "cuda"):
                if (base / name).is_file():
                    dep = (base / name).resolve()
                    if dep not in seen:
                        seen.add(dep)
                        todo.append(dep)
                    break
    return seen


def _names(header: Path) -> list[re.Pattern[str]]:
    """How a notebook would show a header: its path or file name, or a type it defines (``name<`` for a template,
    the bare name where it holds an underscore and so is no plain word)."""
    text = header.read_text()
    out = [re.compile(re.escape(header.name))]
    for name in re.findall(r"^\s*(?:template\s*<[^>]*>\s*)?(?:struct|class)\s+(\w+)", text, re.M):
        out.append(re.compile(rf"\b{name}\s*<" + (rf"|\b{name}\b" if "_" in name else "")))
    return out


def _cells(path: Path) -> list[dict]:
    st = path.stat()
    return _cells_of(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _cells_of(path: Path, mtime_ns: int, size: int) -> list[dict]:  # one parse per version of a notebook
    return json.loads(path.read_text())["cells"]


def _cells_before(exercise: str, notebooks: dict[str, Path], *, through_check: bool = False
                  ) -> list[tuple[str, int, str]]:
    """(notebook, cell, text) of every cell a learner reads before the exercise: every earlier chapter, and its own
    up to the cell that introduces it (sources and stored outputs) -- or, ``through_check``, up to and including the
    cell that checks it (the exercise's own text too)."""
    spec = specs.get(exercise)
    out = []
    for chapter, path in notebooks.items():
        if chapter > spec.chapter:
            continue
        cells = _cells(path)
        at = spoilers.exercise_cell(cells, spec) if chapter == spec.chapter else None
        if at is not None and through_check:
            at = next((i + 1 for i, c in enumerate(cells) if c.get("cell_type") == "code" and
                       re.search(rf"tklab\.check\(\s*[\"']{spec.id}[\"']", "".join(c.get("source", "")))), at + 1)
        for n, cell in enumerate(cells[:len(cells) if at is None else at]):
            texts = ["".join(cell.get("source", ""))]
            for o in cell.get("outputs", []):
                texts.append("".join(o.get("text", "")))
                texts += ["".join(v) for k, v in o.get("data", {}).items() if k.startswith("text/")]
            out.append((path.name, n, "\n".join(texts)))
    return out


def _header_allowed(header: Path, exercise: str, root: Path, notebooks: dict[str, Path]) -> str | None:
    """None if ``header`` may hold ``exercise``'s answer (see the module docstring); else why not."""
    spec = specs.get(exercise)
    own = root / "exercises" / spec.exercise_file
    if own.suffix in (".cu", ".cuh") and header.resolve() in _reach(own, root):
        return f"exercises/{spec.exercise_file} includes it"
    names = _names(header)
    for nb, n, text in _cells_before(exercise, notebooks):
        if any(p.search(text) for p in names):
            return f"notebooks/{nb}, cell {n} shows it before the exercise"
    return None


def leaks(root: Path, notebooks: dict[str, Path] | None = None) -> dict[tuple[str, str], list[str]]:
    """{(file, exercise): [where, ...]} of every answer line lying in the scanned tree under ``root``."""
    notebooks = CHAPTERS if notebooks is None else notebooks
    answers = {e: _answers(e) for e in IDS}
    # spoilers.scan looks for each form in each whitespace-squeezed line; a form absent from the whole squeezed
    # file cannot be in a line of it, so only the files that hold one are scanned line by line
    forms = {e: {f for code in lines for f in spoilers._forms(code)} for e, lines in answers.items()}
    found: dict[tuple[str, str], list[str]] = {}
    for path in _files(root):
        text = _text(path)
        if text is None:
            continue
        squeezed = re.sub(r"[^\S\n]+", "", text)
        rel = path.relative_to(root).as_posix()
        for exercise, lines in answers.items():
            if rel == f"exercises/{specs.get(exercise).exercise_file}":
                continue  # its own file: tests/test_spoilers.py
            if not any(f in squeezed for f in forms[exercise]):
                continue
            hits = spoilers.scan(text, lines)
            if hits and rel.startswith("cuda/") and path.suffix in (".cuh", ".h") and \
                    _header_allowed(path, exercise, root, notebooks) is None:
                continue
            for h in hits:
                found.setdefault((rel, exercise), []).append(f"{rel}:{h.line}: {h.text!r} holds {exercise}'s "
                                                               f"answer line {h.answer!r}")
    return found


@functools.cache
def _leaks_here() -> dict[tuple[str, str], list[str]]:
    return leaks(ROOT)


def test_no_answer_line_outside_solutions():
    new = {k: v for k, v in _leaks_here().items() if k not in KNOWN}
    assert not new, "answer lines outside solutions/:\n" + "\n".join(w for v in new.values() for w in v)


def test_known_leaks_are_still_there():
    """The list of leaks not fixed yet only shrinks: a fixed one leaves it."""
    gone = [f"{f} ({e}): {why}" for (f, e), why in KNOWN.items() if (f, e) not in _leaks_here()]
    assert not gone, "fixed: remove from KNOWN:\n" + "\n".join(gone)


# ---- the check can fail: leaks planted in a copy of the tree ----

def _answer(exercise: str, where: str = "") -> str:
    """One of the exercise's answer lines (as the solution writes it), chosen from its solution at run time."""
    lines = [line for line in _answers(exercise).values() if where in line]
    assert lines, f"{exercise} has no answer line holding {where!r}"
    return lines[0]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the scanned tree (what the planted leaks go into)."""
    ignored = _ignored(ROOT)

    def skip(folder: str, names: list[str]) -> set[str]:
        rel = Path(folder).relative_to(ROOT).as_posix()
        return {n for n in names if n in SKIPPED_PARTS or n == "data" or _is_ignored(f"{rel}/{n}", ignored)}

    for d in (*SCANNED_DIRS, "notebooks"):
        shutil.copytree(ROOT / d, tmp_path / d, ignore=skip)
    for f in SCANNED_FILES:
        shutil.copy(ROOT / f, tmp_path / f)
    return tmp_path


def _notebooks(root: Path) -> dict[str, Path]:
    return {p.name[:2]: p for p in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))}


def _new(root: Path) -> set[tuple[str, str]]:
    return set(leaks(root, _notebooks(root))) - set(KNOWN) - set(_leaks_here())


def test_a_leak_planted_in_a_test_a_module_a_doc_or_another_exercise_is_caught(tree: Path):
    line = _answer("ch04_swizzle")
    (tree / "tests" / "test_planted.py").write_text(f'EXPECTED = "{line}"\n')
    (tree / "tklab" / "planted.py").write_text(f"# {line}\n")
    with (tree / "docs" / "ARCHITECTURE.md").open("a") as f:
        f.write(f"\n    {line}\n")
    with (tree / "exercises" / "ch05_mma.cu").open("a") as f:
        f.write(f"\n// {line}\n")
    assert {("tests/test_planted.py", "ch04_swizzle"), ("tklab/planted.py", "ch04_swizzle"),
            ("docs/ARCHITECTURE.md", "ch04_swizzle"), ("exercises/ch05_mma.cu", "ch04_swizzle")} <= _new(tree)


@pytest.mark.skipif(shutil.which("git") is None, reason="no git here")
def test_only_what_git_ignores_is_skipped(tmp_path: Path):
    """A checkout's scratch (a git-ignored folder) is no clone's: skipped. The same leak in a file git does not
    ignore, even one beside it, is caught."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/bench/_scratch/\n")
    (tmp_path / "bench" / "_scratch").mkdir(parents=True)
    line = _answer("ch04_swizzle")
    (tmp_path / "bench" / "_scratch" / "copy.py").write_text(f"# {line}\n")
    (tmp_path / "bench" / "_scratch_notes.md").write_text(f"    {line}\n")
    found = set(leaks(tmp_path, {}))
    assert ("bench/_scratch_notes.md", "ch04_swizzle") in found
    assert ("bench/_scratch/copy.py", "ch04_swizzle") not in found


def test_a_later_exercise_may_not_hold_an_earlier_chapters_answer_unless_an_earlier_chapter_gives_it(tree: Path):
    """Chapter 10's file holding chapter 09's update is a leak; a line chapter 07 gives (taught) is not an answer of
    chapter 08."""
    with (tree / "exercises" / "ch11_flash_bwd.cu").open("a") as f:
        f.write(f"\n    {_answer('ch09_flash')}\n")
    assert ("exercises/ch11_flash_bwd.cu", "ch09_flash") in _new(tree)
    taught = spoilers.given_lines(specs.get("ch07_tma_ring"))
    ws = spoilers.answer_lines(specs.get("ch08_warp_specialized"))
    assert set(ws) & taught, "chapter 08's design exercise repeats lines chapter 07 gives (the rule's reason)"
    assert not set(_answers("ch08_warp_specialized")) & taught


def test_a_header_the_exercise_can_include_may_not_hold_its_answer(tree: Path):
    """The header rule's two halves: an answer in a header the exercise's file reaches through its includes is
    caught; so is one in a header a notebook names before the exercise."""
    line = _answer("ch09_flash")
    reduce = tree / "cuda" / "tk" / "ops" / "warp" / "reduce.cuh"
    reduce.write_text(reduce.read_text() + f"\n// {line}\n")
    assert ("cuda/tk/ops/warp/reduce.cuh", "ch09_flash") in _new(tree)

    # a header nobody includes, named in a notebook before chapter 05's exercise
    lone = tree / "cuda" / "tk" / "lone_planted.cuh"
    lone.write_text(f"// {_answer('ch05_mma', 'mma')}\n")
    assert _reach(tree / "exercises" / "ch05_mma.cu", tree).isdisjoint({lone.resolve()})
    assert ("cuda/tk/lone_planted.cuh", "ch05_mma") not in _new(tree)  # unreachable, never named: allowed
    nb = tree / "notebooks" / CHAPTERS["05"].name
    data = json.loads(nb.read_text())
    data["cells"].insert(1, {"cell_type": "markdown", "id": "planted", "metadata": {},
                             "source": ["See `cuda/tk/lone_planted.cuh`."]})
    nb.write_text(json.dumps(data))
    assert ("cuda/tk/lone_planted.cuh", "ch05_mma") in _new(tree)


#: Library headers that package what an exercise asks for, and those exercises: out of their reach, and shown after
#: them (the library's ring for chapter 07's design exercise; the online-softmax update for chapter 09's exercises).
PACKAGES = {"tk/hopper/pipeline.cuh": ("ch07_ring_protocol",),
            "tk/ops/warp/online_softmax.cuh": ("ch09_flash", "ch09_local_mask")}


@pytest.mark.parametrize(("header", "exercise"), [(h, e) for h, es in PACKAGES.items() for e in es])
def test_a_header_that_packages_an_exercise_is_out_of_its_reach(header: str, exercise: str):
    """The exercise writes by hand what the header packages: neither its file nor its solution reaches the header
    through their includes, and no notebook names the header before the exercise."""
    spec = specs.get(exercise)
    path = (ROOT / "cuda" / header).resolve()
    for f in (ROOT / "exercises" / spec.exercise_file, ROOT / spec.solution):
        reached = _reach(f, ROOT)
        assert reached, f"{f} includes nothing of the library"
        assert path not in reached, f"{f.relative_to(ROOT)} reaches cuda/{header}"
    assert _header_allowed(path, exercise, ROOT, CHAPTERS) is None


def test_include_graph_is_followed():
    """_reach follows nested includes (tk.cuh reaches pipeline.cuh through hopper.cuh): a test of the test."""
    reached = _reach(ROOT / "exercises" / specs.get("ch07_tma_ring").exercise_file, ROOT)
    assert (ROOT / "cuda" / "tk" / "hopper" / "pipeline.cuh").resolve() in reached


# ---- links ----

_LINK = re.compile(r"\]\([^)\s]{1,300}\)|planted\.toml")  # a markdown link's target, or the mistakes file named


def _link_hits(exercise: str, root: Path, notebooks: dict[str, Path]) -> list[str]:
    spec = specs.get(exercise)
    folder = Path(spec.solution).parent.as_posix()
    bad = re.compile(rf"{re.escape(folder)}/|{re.escape(spec.solution)}|planted\.toml")
    hits = []
    for nb, n, text in _cells_before(exercise, notebooks, through_check=True):
        hits += [f"notebooks/{nb}, cell {n}: {m.group(0)}" for m in _LINK.finditer(text) if bad.search(m.group(0))]
    own = (root / "exercises" / spec.exercise_file).read_text()
    hits += [f"exercises/{spec.exercise_file}: {m.group(0)}" for m in _LINK.finditer(own) if bad.search(m.group(0))]
    return hits


@pytest.mark.parametrize("exercise", IDS)
def test_nothing_before_an_exercise_links_its_answer(exercise: str):
    hits = _link_hits(exercise, ROOT, CHAPTERS)
    assert not hits, f"{exercise}: links to a file holding its answer:\n" + "\n".join(hits)


def test_a_planted_link_to_the_answer_is_caught(tree: Path):
    """The exercise's own text linking its mistakes file, or an exercise file linking its solution, is caught."""
    assert _link_hits("ch11_flash_bwd", tree, _notebooks(tree)) == []
    nb = tree / "notebooks" / CHAPTERS["11"].name
    data = json.loads(nb.read_text())
    at = spoilers.exercise_cell(data["cells"], specs.get("ch11_flash_bwd"))
    assert at is not None
    data["cells"][at]["source"] = "".join(data["cells"][at]["source"]) + \
        "\nThe mistakes: [planted](../solutions/ch11_flash_bwd/planted.toml)."
    nb.write_text(json.dumps(data))
    assert len(_link_hits("ch11_flash_bwd", tree, _notebooks(tree))) == 1
    ex = tree / "exercises" / specs.get("ch09_flash").exercise_file
    ex.write_text(ex.read_text() + "\n// [the answer](../solutions/ch09_flash/ch09_flash.cu)\n")
    assert len(_link_hits("ch09_flash", tree, _notebooks(tree))) == 1
