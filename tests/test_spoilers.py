"""No answer before its exercise. What a learner sees before an exercise -- the notebooks up to it (sources and
stored outputs), every exercise file (they all sit in the learner's folder from the start), the messages its checks
print -- is scanned for every answer line of every exercise and drill (``tklab.grading.spoilers``:
whitespace-normalised, trivial lines ignored), whatever shape the exercise takes (one or several per chapter, a
design exercise in a copy of its chapter's kernel, a check written as a class or a function). A chapter may show an
answer after its exercise, never before; an earlier chapter precedes it entirely; no exercise file holds the answer
of an exercise of its chapter or a later one (its own included: in a comment, a goal, a stub); an earlier chapter's
answer may show (chapter 10's kernel holds chapter 09's update, as given code), except in a debugging exercise: its
file holds no other exercise's answer line at all, whatever the chapter, and its own right lines (its bug's fix)
never."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest
from answers import answer

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
    wait = answer("ch07_tma_ring", "wait(", ".full[").rstrip(";")  # the consumer's wait: the answer of a TODO
    assert "".join(wait.split()) in answers
    assert not any("__syncthreads" in a or a.startswith("#pragma") for a in answers)  # trivial lines are not
    spaced = wait.replace("(", "( ", 1).replace(", ", ",\t")[:-1] + " )"
    assert spaced != wait
    text = f"prose first\nthen `{spaced}` in a sentence\n"
    assert [h.line for h in spoilers.scan(text, answers)] == [2]
    assert spoilers.scan("wait(pipe.empty[at.stage], at.phase ^ 1);", answers) == []  # given code, not the answer


@pytest.mark.parametrize("exercise", IDS)
def test_no_notebook_shows_an_answer_before_its_exercise(exercise):
    hits = _notebook_hits(exercise)
    assert not hits, "answer lines before the exercise:\n" + "\n".join(hits)


@pytest.mark.parametrize("exercise", IDS)
def test_no_exercise_file_holds_the_answer_of_its_chapter_or_a_later_one(exercise):
    """Every exercise file is in the learner's folder from the start. A line an exercise gives as code is taught by its
    chapter (chapter 07's ring hands its stages back as chapter 08's warp-specialised GEMM must), so a later chapter's
    answer line may stand in it as given code; its own answers, and those of its chapter's other exercises, never. A
    design exercise's file (a copy of its chapter's kernel) holds no answer of its chapter or a later one at all."""
    spec = specs.get(exercise)
    text = (ROOT / "exercises" / spec.exercise_file).read_text()
    given = spoilers.given_lines(spec)
    hits = [f"exercises/{spec.exercise_file}:{h.line}: {h.text!r} is {other}'s answer line {h.answer!r}"
            for other in IDS if specs.get(other).chapter >= spec.chapter
            for code, line in spoilers.answer_lines(specs.get(other)).items()
            if other == exercise or specs.get(other).chapter == spec.chapter or spec.design or code not in given
            for h in spoilers.scan(text, {code: line})]
    assert not hits, "\n".join(hits)


@pytest.mark.parametrize("exercise", [i for i in IDS if specs.get(i).kind == "debug"])
def test_a_debugging_exercise_holds_no_answer_line_of_any_exercise(exercise):
    """A debugging exercise is a whole program in the learner's folder: built on code its chapter shows, never on
    another exercise's solution (ch02_smem_tiling's filled-in loop inside it would give that exercise away), and
    its own fix is not in it either."""
    spec = specs.get(exercise)
    text = (ROOT / "exercises" / spec.exercise_file).read_text()
    hits = [f"exercises/{spec.exercise_file}:{h.line}: {h.text!r} is {other}'s answer line {h.answer!r}"
            for other in IDS for code, line in spoilers.answer_lines(specs.get(other)).items()
            for h in spoilers.scan(text, {code: line})]
    assert not hits, "\n".join(hits)


def _messages(spec) -> list[tuple[str, str]]:
    """(where, text) of what the exercise's checks can print: every string field of its static checks and concept
    floors (a kit's check made with the exercise's words), and every string its spec file writes (a check of its
    own, however it is written)."""
    out = [(f"{type(c).__name__}.{f.name}", getattr(c, f.name)) for c in (*spec.static, *spec.floors)
           if dataclasses.is_dataclass(c) for f in dataclasses.fields(c) if isinstance(getattr(c, f.name), str)]
    source = specs.spec_file(spec.id)
    if source is not None:
        tree = ast.parse(source.read_text())
        out += [(f"{source.parent.name}/{source.name}:{n.lineno}", n.value) for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return out


@pytest.mark.parametrize("exercise", IDS)
def test_no_check_message_holds_an_answer(exercise):
    """A check's advice (``SassHas(fix=...)``, a floor's or a probe's message) is printed in every failed report,
    and in the stored output of the check cell: it states the goal, never the exercise's answer line."""
    spec = specs.get(exercise)
    answers = spoilers.answer_lines(spec)
    hits = [f"{where}: {text[:80]!r} holds {h.answer!r}" for where, text in _messages(spec)
            for h in spoilers.scan(text, answers)]
    assert not hits, f"{exercise}'s checks print its answer:\n" + "\n".join(hits)


@pytest.mark.parametrize("exercise", IDS)
def test_no_hint_question_holds_an_answer(exercise):
    """A ladder's questions (rung 2: the default ``question`` and those keyed by a verdict) come before the recipe,
    after a failed check: they point at the idea the verdict is about, never at the exercise's answer line."""
    from tklab.grading import hints

    lad = hints.ladder(exercise)
    answers = spoilers.answer_lines(specs.get(exercise))
    hits = [f"{key or 'question'}: {text[:80]!r} holds {h.answer!r}"
            for key, text in [("", lad.levels[1]), *lad.questions.items()] for h in spoilers.scan(text, answers)]
    assert not hits, f"{exercise}'s hint questions give its answer:\n" + "\n".join(hits)
