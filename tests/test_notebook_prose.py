"""Lessons, not logs (issue 41, item 3; ../shared/style.md): the chapters' prose, read from the stored notebooks.

A chapter states what is true of the code the reader sees. When and where a number was measured belongs in
``bench/results/`` and at most one "measured on: device, date, commit" line per cell; commit hashes, removed
options and the history of attempts belong in ``docs/ROADMAP.md``. So, for every markdown cell of chapters 00–11:

- no more than ``WORDS`` words (a longer cell is split where its subject changes, or cut);
- no commit hash outside its one "measured on" line (a file of ``bench/results/`` named by the commit it measured
  is cited by that name: the name is the file's address, not a hash in a sentence);

and a code cell whose stored output runs past ``LINES`` lines is folded (``metadata.jupyter.outputs_hidden``:
JupyterLab shows a bar to open it) or prints less.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[01][0-9]_*.ipynb"))
WORDS = 250
LINES = 40

# A commit hash as prose writes it: 7-40 hex digits with at least one digit and one letter, standing alone (not
# inside a word, a number, a hex literal or a file name such as flash_bwd_<date>_<hash>.md).
HASH = re.compile(r"(?<![\w./-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
MEASURED_ON = re.compile(r"measured on", re.IGNORECASE)


def words(markdown: str) -> int:
    """Words a reader reads: link targets, HTML tags and table rules left out; a token counts if it has a letter
    or a digit."""
    text = re.sub(r"\]\([^)]*\)", "]", markdown)
    text = re.sub(r"<[^>]+>", " ", text)
    return sum(1 for token in text.split() if re.search(r"[A-Za-z0-9]", token))


def hashes(markdown: str) -> list[str]:
    """The commit hashes of a cell outside its first "measured on" line."""
    lines = markdown.splitlines()
    measured = [i for i, line in enumerate(lines) if MEASURED_ON.search(line)]
    return [h for i, line in enumerate(lines) if not measured or i != measured[0] for h in HASH.findall(line)]


def _markdown(path: Path) -> list[tuple[str, str]]:
    cells = json.loads(path.read_text())["cells"]
    return [(f"{path.name[:2]} · cell {i} ({c.get('id')})", "".join(c["source"]))
            for i, c in enumerate(cells) if c["cell_type"] == "markdown"]


def test_the_rules_catch_what_they_are_for() -> None:
    assert words("one [two](../a/very/long/link.md) three | --- | 4 <br> ✓") == 4
    assert hashes("after commit 69085c9 the kernel") == ["69085c9"]
    assert hashes("measured on: H200, 2026-12-02, commit 69085c9\n(`flash_bwd_2026-12-02_69085c9.md`)") == []
    assert hashes("Measured on the H200 (a2b4b3b)\nand later (f21183e)") == ["f21183e"]
    assert hashes("0x1f2e3d4c, 1024000, deadbeef, 12345678, sm_90a, e4m3") == []


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_markdown_cell_runs_over_the_word_limit(path: Path) -> None:
    long = [f"{where}: {n} words" for where, src in _markdown(path) if (n := words(src)) > WORDS]
    assert not long, f"markdown cells over {WORDS} words (split them where the subject changes, or cut):\n" + \
        "\n".join(long)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_no_commit_hash_outside_a_measured_on_line(path: Path) -> None:
    found = [f"{where}: {h}" for where, src in _markdown(path) if (h := hashes(src))]
    assert not found, "commit hashes in a lesson's prose (cite the bench/results file; the history goes to " \
        "docs/ROADMAP.md; one 'measured on: device, date, commit' line per cell may carry one):\n" + "\n".join(found)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_long_outputs_are_folded(path: Path) -> None:
    long = []
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] != "code" or cell.get("metadata", {}).get("jupyter", {}).get("outputs_hidden"):
            continue
        text = "".join("".join(o.get("text", "")) or "".join(o.get("data", {}).get("text/plain", ""))
                       for o in cell.get("outputs", []) if "image/png" not in o.get("data", {}))
        if text.count("\n") > LINES:
            long.append(f"{path.name[:2]} · cell {i} ({cell.get('id')}): {text.count(chr(10))} lines")
    assert not long, f"outputs over {LINES} lines, not folded (metadata.jupyter.outputs_hidden) :\n" + "\n".join(long)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_cell_ids_are_unique(path: Path) -> None:
    """A split cell gets an id of its own: nbformat renames a duplicate on every read, so tests and links that
    name a cell by id would find another one."""
    ids = [c.get("id") for c in json.loads(path.read_text())["cells"]]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_stored_outputs_have_an_execution_count(path: Path) -> None:
    """nbval refuses a code cell that holds outputs but no execution count ("Unrun reference cell has outputs"): a
    cell added with a stored output must be numbered like the cells around it."""
    cells = json.loads(path.read_text())["cells"]
    bad = [f"cell {i} ({c.get('id')})" for i, c in enumerate(cells)
           if c["cell_type"] == "code" and c.get("outputs") and c.get("execution_count") is None]
    assert not bad, f"{path.name}: outputs without an execution count: {bad}"
