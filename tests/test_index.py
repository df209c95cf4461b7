"""The exercise index (notebooks/README.md, ``python -m tklab exercises --list``) is the registry's, not a
hand-kept list: the README's table equals what the registry generates, and every row's link opens a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tklab.grading import exercises, specs

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
