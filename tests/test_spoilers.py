"""No answer before its exercise: the notebooks (sources and stored outputs) and the exercise files are
scanned for every answer line of every exercise and drill (``tklab.grading.spoilers``: whitespace-normalised,
trivial lines ignored). A chapter may show an answer after its exercise, never before; an earlier chapter
precedes it entirely; an exercise file never holds its own answer (in a comment, a goal, a stub)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tklab.grading import specs, spoilers

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = {p.name[:2]: p for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))}
IDS = specs.all_ids()


def _texts(cell: dict) -> list[tuple[str, str]]:
    out = [("source", "".join(cell.get("source", "")))]
    for o in cell.get("outputs", []):
        if "text" in o:
            out.append(("output", "".join(o["text"])))
        out += [("output", "".join(v)) for k, v in o.get("data", {}).items() if k.startswith("text/")]
    return out


def _notebook_hits(exercise: str) -> list[str]:
    """Where each answer line shown before the exercise is, for the message."""
    spec = specs.get(exercise)
    answers = spoilers.answer_lines(spec)
    hits = []
    for chapter, path in CHAPTERS.items():
        if chapter > spec.chapter:
            continue
        cells = json.loads(path.read_text())["cells"]
        at = spoilers.exercise_cell(cells, spec) if chapter == spec.chapter else None
        for n, cell in enumerate(cells[:len(cells) if at is None else at]):
            for kind, text in _texts(cell):
                for h in spoilers.scan(text, answers):
                    hits.append(f"notebooks/{path.name}, cell {n} (id {cell.get('id')}), {kind} line {h.line}: "
                                f"{h.text!r} holds {exercise}'s answer line {h.answer!r}")
    return hits


def test_the_scanner_finds_an_answer_however_it_is_spaced():
    spec = specs.get("ch07_tma_ring")
    answers = spoilers.answer_lines(spec)
    assert "wait(pipe.full[at.stage],at.phase)" in answers  # the consumer's wait: the answer of a TODO
    assert not any("__syncthreads" in a or a.startswith("#pragma") for a in answers)  # trivial lines are not
    text = "prose first\nthen `wait( pipe.full[at.stage],\tat.phase )` in a sentence\n"
    assert [h.line for h in spoilers.scan(text, answers)] == [2]
    assert spoilers.scan("wait(pipe.empty[at.stage], at.phase ^ 1);", answers) == []  # given code, not the answer


@pytest.mark.parametrize("exercise", IDS)
def test_no_notebook_shows_an_answer_before_its_exercise(exercise):
    hits = _notebook_hits(exercise)
    assert not hits, "answer lines before the exercise:\n" + "\n".join(hits)


@pytest.mark.parametrize("exercise", IDS)
def test_the_exercise_file_does_not_hold_its_answer(exercise):
    spec = specs.get(exercise)
    path = ROOT / "exercises" / spec.exercise_file
    hits = spoilers.scan(path.read_text(), spoilers.answer_lines(spec))
    assert not hits, "\n".join(f"exercises/{spec.exercise_file}:{h.line}: {h.text!r} is the answer line "
                               f"{h.answer!r}" for h in hits)


@pytest.mark.parametrize("exercise", IDS)
def test_no_static_check_message_holds_an_answer(exercise):
    """A static check's advice (``SassHas(fix=...)`` and the like) is printed in every failed report, and
    in the stored output of the check cell: it states the goal, never the exercise's answer line."""
    spec = specs.get(exercise)
    answers = spoilers.answer_lines(spec)
    hits = [f"{type(check).__name__} {check_field.name}={getattr(check, check_field.name)!r}: holds {h.answer!r}"
            for check in spec.static if dataclasses.is_dataclass(check)
            for check_field in dataclasses.fields(check) if isinstance(getattr(check, check_field.name), str)
            for h in spoilers.scan(getattr(check, check_field.name), answers)]
    assert not hits, f"{exercise}'s static checks print its answer:\n" + "\n".join(hits)
