"""Hint ladders: every exercise and drill has three levels, levels 1 and 2 never give an answer line, the
levels unlock one at a time (a failed check of the learner's copy, or an explicit ask) and are remembered
in the learner's folder; a FAILED check shows level 1; a grade sheet can read the level a student reached."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import stubs

import tklab
from tklab.grading import hints, specs, spoilers
from tklab.grading.check import check

ROOT = Path(__file__).resolve().parent.parent
IDS = specs.all_ids()


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "exercises" / ".hints.json"
    monkeypatch.setenv(hints.STATE_VARIABLE, str(path))
    return path


@pytest.mark.parametrize("exercise", IDS)
def test_every_exercise_has_a_ladder_whose_first_levels_give_no_answer_line(exercise):
    lad = hints.ladder(exercise)
    assert lad.concept and all(lad.levels)
    answers = spoilers.answer_lines(specs.get(exercise))
    # a debugging exercise's fix may be a bare call (a missing __syncthreads()): no line that says enough to hide
    assert answers or specs.get(exercise).kind == "debug", f"{exercise}: no answer line to hide"
    for level in (1, 2):
        hits = spoilers.scan(lad.levels[level - 1], answers)
        assert not hits, f"{exercise}: hint level {level} gives the answer line {hits[0].answer!r}"
    # level 3 is the answer: every answer line is in it
    assert all(spoilers.scan(lad.levels[2], {a: a}) for a in answers), exercise


def test_levels_unlock_one_at_a_time_and_are_remembered(state: Path):
    first = tklab.hint("ch07_tma_ring")
    assert first.level == 1 and "mbarrier" in first.text and "unlocks after a failed check" in first.note
    assert tklab.hint("ch07").level == 1  # nothing unlocked level 2 yet: level 1 again
    hints.record_failure("ch07_tma_ring")
    second = tklab.hint("ch07_tma_ring")
    assert second.level == 2 and "tma::expect" in second.text
    locked = tklab.hint("ch07_tma_ring", level=3)
    assert locked.level == 2 and "not unlocked" in locked.note
    third = tklab.hint("ch07_tma_ring", more=True)  # an explicit ask
    assert third.level == 3 and "wait(pipe.full[at.stage], at.phase);" in third.text
    assert tklab.hint("ch07_tma_ring", level=1).level == 1  # seen levels can be shown again
    data = json.loads(state.read_text())
    assert data["ch07_tma_ring"]["seen"] == 3 and data["ch07_tma_ring"]["failed"] == 1
    assert hints.reached("ch07_tma_ring") == 3 and hints.reached("ch02_sectors") == 0
    assert "<b>ch07_tma_ring</b>" in third._repr_html_() and "<pre>" in third._repr_html_()


def test_the_note_says_what_is_unlocked_already(state: Path):
    """Two failed checks unlock levels 2 and 3: the level-1 hint shown next says level 2 is there, not that it
    needs a failed check."""
    hints.record_failure("ch05_mma")
    hints.record_failure("ch05_mma")
    first = tklab.hint("ch05_mma")
    assert first.level == 1 and "unlocks after" not in first.note
    assert first.note == "Level 2 (the API and its order) is unlocked: tklab.hint('ch05_mma') shows it."
    assert tklab.hint("ch05_mma").level == 2


def test_a_broken_state_file_costs_the_memory_not_the_hint(state: Path):
    state.parent.mkdir(parents=True)
    state.write_text("{not json")
    assert tklab.hint("ch02_sectors").level == 1
    assert json.loads(state.read_text())["ch02_sectors"]["seen"] == 1


def test_a_failed_check_shows_level_one_and_only_the_learners_copy_unlocks(state: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    from tklab.grading import exercises as learner_files

    res = check("ch04_bank_passes", run=False)  # the learner's untouched copy in exercises/: not an attempt
    assert res.passed is False and res.hint.startswith(hints.ladder("ch04_bank_passes").levels[0])
    assert "hint: " in repr(res) and "tklab.hint('ch04_bank_passes')" in repr(res)
    assert res.summary.startswith("not started: ") and not state.exists()
    monkeypatch.setattr(learner_files, "EXERCISES", tmp_path / "exercises")  # a learner's copy with a line written
    (tmp_path / "exercises" / "drills").mkdir(parents=True, exist_ok=True)
    res = check("ch04_bank_passes", stubs.begun_file("ch04_bank_passes", tmp_path / "exercises" / "drills"),
                run=False)
    assert res.passed is False and not res.not_started
    assert json.loads(state.read_text())["ch04_bank_passes"]["failed"] == 1
    elsewhere = tmp_path / "ch04_bank_passes.py"  # a file outside exercises/ (a grader's copy): no state
    elsewhere.write_text("def bank_passes(stride):\n    pass\n")
    assert check("ch04_bank_passes", elsewhere, run=False).passed is False
    assert json.loads(state.read_text())["ch04_bank_passes"]["failed"] == 1
    passed = check("ch04_bank_passes", ROOT / "solutions" / "drills" / "ch04_bank_passes.py", run=False)
    assert passed.hint == ""


def test_the_level_a_student_reached_is_read_from_their_folder(tmp_path: Path):
    student = tmp_path / "class" / "ada"
    (student / "work" / "exercises").mkdir(parents=True)
    hints.hint("ch05_mma", more=True, state=student / "work" / "exercises" / ".hints.json")
    hints.hint("ch05_mma", more=True, state=student / "work" / "exercises" / ".hints.json")
    assert hints.reached_in(student, "ch05_mma") == 2 and hints.reached_in(student, "ch06_tiles") == 0
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    hints.hint("ch06_tiles", more=True, state=elsewhere / ".hints.json")
    os.symlink(elsewhere, student / "linked")  # a link out of the student's folder is not theirs
    assert hints.reached_in(student, "ch06_tiles") == 0


def test_hint_command_line(state: Path, capsys: pytest.CaptureFixture[str]):
    from tklab.__main__ import main

    assert main(["hint", "ch09_block_kind"]) == 0
    out = capsys.readouterr().out
    assert "hint 1/3" in out and "python -m tklab hint ch09_block_kind --more" in out  # the command's words
    assert "more=True" not in out and "tklab.hint(" not in out
    assert main(["hint", "ch09_block_kind", "--more"]) == 0
    assert "hint 2/3" in capsys.readouterr().out
    assert main(["hint", "ch09_block_kind", "--level", "3"]) == 0
    out = capsys.readouterr().out
    assert "not unlocked" in out and "--more" in out and "more=True" not in out
    assert main(["hint", "ch99"]) == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.nvrtc  # run=False: the bank conflict is found by NVRTC's compile-time probe
def test_a_typical_mistake_gets_the_concept_not_the_line(state: Path, tmp_path: Path):
    """ch04 with the plain row-major layout (every column in one bank): FAILED, with level 1 of the ladder,
    which names banks and columns but holds no answer line."""
    f = tmp_path / "ch04_swizzle.cu"
    f.write_text((ROOT / specs.get("ch04_swizzle").solution).read_text().replace("r * TILE + (c ^ r)", "r * TILE + c"))
    res = check("ch04_swizzle", f, run=False)
    assert res.passed is False and "bank" in res.hint
    assert not spoilers.scan(res.hint, spoilers.answer_lines(specs.get("ch04_swizzle")))
