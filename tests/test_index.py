"""The exercise index (notebooks/README.md, ``python -m tklab exercises --list``) is the registry's, not a
hand-kept list: the README's table equals what the registry generates, and every row's link opens a file.
The README's chapter table lists every notebook, and every exercise a chapter names is a link to it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tklab.grading import index as exercises
from tklab.grading import specs

ROOT = Path(__file__).resolve().parent.parent


def test_readme_index_is_the_registrys():
    text = exercises.README.read_text()
    assert exercises.readme_with_index(text) == text, \
        "notebooks/README.md's index differs from the registry: run `python -m tklab exercises --index`"
    rows = exercises.index_rows()
    assert [r.id for r in rows] == specs.all_ids()
    for r in rows:
        assert (ROOT / "exercises" / r.file).is_file(), r
        assert f"[`{r.id}`](../exercises/{r.file})" in text
    assert {r.without_gpu for r in rows if r.kind == "drill"} == {"CPU"}


def test_index_without_markers_is_an_error():
    with pytest.raises(ValueError, match="index markers"):
        exercises.readme_with_index("# a README without the index\n")


def test_list_shows_every_exercise_and_drill(capsys: pytest.CaptureFixture[str]):
    assert exercises.main(["--list"]) == 0
    out = capsys.readouterr().out
    for i in specs.all_ids():
        assert i in out
    assert f"{len(specs.all_ids())} in all" in out


def test_readme_lists_every_notebook():
    text = exercises.README.read_text()
    notebooks = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    rows = exercises.chapter_rows()
    assert sorted(r.file for r in rows) == notebooks
    assert [r.number for r in rows if r.number != "—"] == [n[:2] for n in notebooks if n[:2].isdigit()]
    for r in rows:
        assert f"| {r.number} | [{r.title}]({r.file}) |" in text, r
    assert set(exercises.TOPICS) == {Path(n).stem for n in notebooks}, "TOPICS names a notebook that is gone"


def test_a_notebook_without_a_topic_stops_the_index(tmp_path: Path):
    (tmp_path / "12_next.ipynb").write_text(json.dumps(
        {"cells": [{"cell_type": "markdown", "id": "a", "metadata": {}, "source": "# 12 · Next\n"}],
         "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    with pytest.raises(ValueError, match="12_next.ipynb has no line in the workbook's index"):
        exercises.chapter_rows(tmp_path)


#: Mentions that stay code text while their chapter is rewritten by its owner: (notebook, exercise file).
UNLINKED: set[tuple[str, str]] = set()


def test_every_exercise_a_chapter_mentions_is_a_link():
    """A chapter's prose names an exercise's file (``exercises/ch07_tma_ring.cu``) or the exercise itself
    ("exercise `ch07_tma_ring`") only inside a link to the learner's copy, which the lab opens in its editor
    (a heading names its exercise; the link follows beneath it)."""
    files = {specs.get(i).exercise_file for i in specs.all_ids()}
    unlinked = []
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            text = "\n".join(line for line in "".join(cell["source"]).splitlines() if not line.startswith("#"))
            found = list(re.finditer(r"\[([^\]\n]*)\]\(([^)\s]*)\)", text))
            links = [(m.start(1), m.end(1), m.group(2)) for m in found]
            targets = [(m.start(2), m.end(2)) for m in found]
            for m in re.finditer(r"(?<!solutions/)exercises/([\w/]+\.(?:cu|py))|exercise `(ch\d\d_\w+)`", text):
                if any(a <= m.start() < b for a, b in targets):
                    continue
                file = m.group(1) or specs.get(m.group(2)).exercise_file
                assert file in files, f"{nb.name} names exercises/{file}, which no exercise has"
                inside = any(a <= m.start() and m.end() <= b and target == f"../exercises/{file}"
                             for a, b, target in links)
                if not inside and (nb.name, f"exercises/{file}") not in UNLINKED:
                    unlinked.append(f"{nb.name}: {text[max(0, m.start() - 30):m.end() + 10]!r}")
    assert not unlinked, "exercises named as text, not as a link to ../exercises/:\n" + "\n".join(unlinked)


def drill_link_faults(notebooks: Path) -> list[str]:
    """Every drill of the registry, linked from the notebook of the chapter its id names (``ch07_...``: chapter
    07) in a markdown cell that says how to check it (``tklab.check("<id>")``) and links no other drill: the link
    stands beside the idea the drill practises, not in a list. No code cell above the link defines the function
    the drill asks for (the chapter may show it after the drill). What is missing, one line a drill."""
    drills = [specs.get(i) for i in specs.all_ids() if specs.get(i).kind == "drill"]
    any_drill = re.compile(r"\]\(\.\./exercises/drills/(\w+)\.py\)")
    missing = []
    for spec in drills:
        chapter = re.match(r"ch(\d\d)_", spec.id).group(1)
        found = sorted(notebooks.glob(f"{chapter}_*.ipynb"))
        if len(found) != 1:
            missing.append(f"{spec.id}: no single notebook for chapter {chapter} ({[p.name for p in found]})")
            continue
        link = re.compile(rf"\[`?exercises/{re.escape(spec.exercise_file)}`?\]\(\.\./exercises/"
                          rf"{re.escape(spec.exercise_file)}\)")
        cells = [(c["cell_type"], "".join(c["source"])) for c in json.loads(found[0].read_text())["cells"]]
        linking = [text for kind, text in cells if kind == "markdown" and link.search(text)]
        first = next((n for n, (kind, text) in enumerate(cells) if kind == "markdown" and link.search(text)),
                     len(cells))
        defined = [n for n, (kind, text) in enumerate(cells[:first])
                   if kind == "code" and re.search(rf"^def {spec.kernel}\(", text, re.M)]
        if defined and linking:
            missing.append(f"{spec.id}: {found[0].name} defines {spec.kernel}() in cell {defined[0]}, above the "
                           f"drill's link (move it after the drill)")
        if not linking:
            missing.append(f"{spec.id}: {found[0].name} has no link [exercises/{spec.exercise_file}]"
                           f"(../exercises/{spec.exercise_file})")
        elif not any(f'tklab.check("{spec.id}")' in text for text in linking):
            missing.append(f"{spec.id}: {found[0].name} links it without saying how to check it "
                           f"(tklab.check(\"{spec.id}\"))")
        elif all(set(any_drill.findall(text)) != {spec.id} for text in linking):
            missing.append(f"{spec.id}: {found[0].name} links it only in a cell that lists other drills too")
    return missing


def test_every_drill_is_linked_from_its_chapter():
    """Issue 42, item 5: a learner meets each drill where the chapter teaches what it practises."""
    missing = drill_link_faults(ROOT / "notebooks")
    assert not missing, "drills not linked from their chapter:\n" + "\n".join(missing)


def test_a_removed_drill_link_is_caught(tmp_path: Path):
    """The check above fails when one link goes: chapter 08's descriptor drill, its link cut from a copy."""
    for nb in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"):
        text = nb.read_text()
        if nb.name.startswith("08_"):
            cut = text.replace("(../exercises/drills/ch08_descriptor.py)", "")
            assert cut != text, "chapter 08 no longer links ch08_descriptor as the test expects"
            text = cut
        (tmp_path / nb.name).write_text(text)
    assert drill_link_faults(tmp_path) == [
        "ch08_descriptor: 08_wgmma_gemm.ipynb has no link [exercises/drills/ch08_descriptor.py]"
        "(../exercises/drills/ch08_descriptor.py)"]


def test_the_drills_function_shown_above_its_link_is_caught(tmp_path: Path):
    """Chapter 02 counts sectors with a function of its own after the drill; moved above the link, it is caught."""
    for nb in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"):
        data = json.loads(nb.read_text())
        if nb.name.startswith("02_"):
            cells = data["cells"]
            at = next(n for n, c in enumerate(cells) if "(../exercises/drills/ch02_sectors.py)" in "".join(c["source"]))
            counting = next(n for n, c in enumerate(cells) if c["cell_type"] == "code"
                            and "def sectors(" in "".join(c["source"]))
            assert counting > at, "chapter 02 shows sectors() before the drill"
            cells.insert(at, cells.pop(counting))
        (tmp_path / nb.name).write_text(json.dumps(data))
    assert drill_link_faults(tmp_path) == [
        f"ch02_sectors: 02_coalescing_tiling.ipynb defines sectors() in cell {at}, above the drill's link "
        "(move it after the drill)"]
