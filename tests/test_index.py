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
