"""Hint ladders (issue 42, item 4): every exercise and drill has four rungs -- the concept, a question about the
learner's own last failed check, the recipe, the code -- and rungs 1-3 never give an answer line. The question opens
after the first failed check of the learner's copy and is chosen by what that check's verdict said (a race gets the
race question); the recipe opens after two more; the code only when asked for, never by failures. What was shown,
and when, is remembered in the learner's own state file; a FAILED check shows rung 1; a grade sheet can read the rung
a student reached in their folder, for the learner's view only."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime
from pathlib import Path

import planted
import pytest
import stubs
import tomllib
from answers import answer

import tklab
from tklab.grading import cases as emu_cases
from tklab.grading import hints, specs, spoilers
from tklab.grading.check import check
from tklab.grading.spec_kit import StaticResult
from tklab.grading.verdict import CheckResult

ROOT = Path(__file__).resolve().parent.parent
IDS = specs.all_ids()


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "exercises" / ".hints.json"
    monkeypatch.setenv(hints.STATE_VARIABLE, str(path))
    return path


def _shown(state: Path, exercise: str) -> list[str]:
    return [s["rung"] for s in json.loads(state.read_text())[exercise]["shown"]]


@pytest.mark.parametrize("exercise", IDS)
def test_every_exercise_has_a_ladder_whose_first_rungs_give_no_answer_line(exercise):
    lad = hints.ladder(exercise)
    assert lad.concept and all(lad.levels[:3]) and lad.levels[1].endswith("?"), exercise  # a question, by default too
    answers = spoilers.answer_lines(specs.get(exercise))
    # a debugging exercise's fix may be a bare call (a missing __syncthreads()): no line that says enough to hide
    assert answers or specs.get(exercise).kind == "debug", f"{exercise}: no answer line to hide"
    for level in (1, 2, 3):
        hits = spoilers.scan(lad.levels[level - 1], answers)
        assert not hits, f"{exercise}: hint rung {level} gives the answer line {hits[0].answer!r}"
    for key, question in lad.questions.items():
        hits = spoilers.scan(question, answers)
        assert not hits, f"{exercise}: the question for {key!r} gives the answer line {hits[0].answer!r}"
        assert question.endswith("?"), (exercise, key)
    # rung 4 is the answer: every answer line is in it
    assert all(spoilers.scan(lad.levels[3], {a: a}) for a in answers), exercise


def test_the_chapters_exercises_ask_about_what_their_planted_mistakes_show():
    """A chapter's own exercise (02-11, as its notebook heads it: not a design exercise, a drill or a debugging
    exercise) has 2-4 questions keyed by a verdict, so that its typical mistakes (a race, a wrong output, a missing
    overlap ...) are asked about by what the check said."""
    main = [m.group(1) for path in sorted((ROOT / "notebooks").glob("[01][0-9]_*.ipynb"))
            for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "markdown"
            for m in [re.match(r"#+ (?:\d+\. )?Exercise `(\w+)`", "".join(cell["source"]))] if m]
    main = [i for i in main if "02" <= specs.get(i).chapter <= "11"]
    assert len(main) == 10, main  # the chapters' own exercises, as their notebooks head them
    for i in main:
        assert 2 <= len(hints.ladder(i).questions) <= 4, (i, sorted(hints.ladder(i).questions))


def test_the_rungs_open_in_order_and_the_code_only_when_asked(state: Path):
    first = tklab.hint("ch07_tma_ring")
    assert (first.level, first.rung) == (1, "concept") and "mbarrier" in first.text
    assert "Level 2 (a question about your last failed check) unlocks after a failed check" in first.note
    assert tklab.hint("ch07").level == 1  # nothing opened the question yet: the concept again
    hints.record_failure("ch07_tma_ring")
    second = tklab.hint("ch07_tma_ring")
    assert second.rung == "question" and second.text == hints.ladder("ch07_tma_ring").levels[1]
    assert "Level 3 (the recipe: the API and its order) unlocks after 2 more failed checks" in second.note
    hints.record_failure("ch07_tma_ring")
    again = tklab.hint("ch07_tma_ring")
    assert again.rung == "question" and "after 1 more failed check of" in again.note  # two failures: not yet
    hints.record_failure("ch07_tma_ring")
    third = tklab.hint("ch07_tma_ring")
    assert third.rung == "recipe" and "tma::expect" in third.text
    assert "is shown only when you ask: tklab.hint('ch07_tma_ring', more=True)" in third.note
    for _ in range(10):  # failures alone never open the code
        hints.record_failure("ch07_tma_ring")
    assert tklab.hint("ch07_tma_ring").rung == "recipe"
    locked = tklab.hint("ch07_tma_ring", level=4)
    assert locked.rung == "recipe" and "not unlocked" in locked.note
    code = tklab.hint("ch07_tma_ring", more=True)  # an explicit ask
    assert code.rung == "code" and answer("ch07_tma_ring", "wait(", ".full[") in code.text  # the consumer's wait
    assert tklab.hint("ch07_tma_ring", level="concept").level == 1  # seen rungs can be shown again, by name too
    data = json.loads(state.read_text())["ch07_tma_ring"]
    assert data["seen"] == 4 and data["failed"] == 13 and data["asked"] == 1
    assert _shown(state, "ch07_tma_ring") == ["concept", "concept", "question", "question", "recipe", "recipe",
                                               "code", "concept"]
    assert all(datetime.fromisoformat(s["at"]) for s in data["shown"])  # when each was shown
    assert hints.reached("ch07_tma_ring") == 4 and hints.reached("ch02_sectors") == 0
    assert "<b>ch07_tma_ring</b>" in code._repr_html_() and "<pre>" in code._repr_html_()


def test_asking_climbs_one_rung_at_a_time(state: Path):
    """``more=True`` shows the next rung now, whatever failures opened: the question, the recipe, then the code."""
    assert [tklab.hint("ch05_mma", more=True).rung for _ in range(5)] == ["concept", "question", "recipe", "code",
                                                                          "code"]
    assert json.loads(state.read_text())["ch05_mma"]["asked"] == 3  # the question, the recipe and the code


def test_the_question_follows_the_verdict(state: Path):
    """The question shown is the one for what the last failed check said: a race gets the race question, a deadlock
    the deadlock question, a kind the file has no question for its broader kind's or the default; the record says
    which verdict each question was about."""
    lad = hints.ladder("ch07_tma_ring")
    assert {"race", "deadlock"} <= set(lad.questions)
    hints.record_failure("ch07_tma_ring", verdict=["race"])
    q = tklab.hint("ch07_tma_ring", level=2)
    assert q.rung == "question" and q.text == lad.questions["race"] and "race" in q.about and "race" in str(q)
    hints.record_failure("ch07_tma_ring", verdict=["deadlock"])
    assert tklab.hint("ch07_tma_ring", level=2).text == lad.questions["deadlock"]
    hints.record_failure("ch07_tma_ring", verdict=["crash"])  # no question for a crash (or any error): the default
    assert tklab.hint("ch07_tma_ring", level=2).text == lad.levels[1]
    assert [s.get("about") for s in hints.shown("ch07_tma_ring")] == ["race", "deadlock", ""]
    assert lad.question_for(["timeout"]) == ("deadlock", lad.questions["deadlock"])  # a timeout may be a deadlock
    ch04 = hints.ladder("ch04_swizzle")  # a failing check's own name comes before its kind
    assert ch04.question_for(["conflict-free tile layout", "static"])[1] == ch04.questions["conflict-free tile layout"]


def _result(**kw) -> CheckResult:
    return CheckResult("ch02_smem_tiling", "t", "x.cu", compiled=True, passed=False, **kw)


def test_the_verdict_keys_come_from_the_checkers_result():
    """What the checker judged, most telling first; a crashed run's message (which quotes what the program printed)
    is not read, so a kernel cannot print its way to another question."""
    race = "the run failed while running M=33, N=65, K=47: SharedRace: shared-memory race (write-after-read) on As"
    assert hints.verdict_keys(_result(run_status="error", run_message=race)) == ["race"]
    oob = "the run failed while running M=5, N=7, K=3: IndexError: tid=[0, 5, 0]: index 5 is out of bounds"
    assert hints.verdict_keys(_result(run_status="error", run_message=oob)) == ["out_of_bounds"]
    assert hints.verdict_keys(_result(run_status="error", run_message="while x: Deadlock: deadlock")) == ["deadlock"]
    assert hints.verdict_keys(_result(run_status="crashed", run_message=f"its last output: {race}")) == ["crash"]
    assert hints.verdict_keys(_result(run_status="timeout", run_message="no result")) == ["timeout"]
    assert hints.verdict_keys(_result(run_status="wrong", mismatch={"output": "C"})) == ["wrong_output"]
    both = _result(run_status="ok", static=[StaticResult("conflict-free tile layout", False, "32 passes"),
                                            StaticResult("writes its output", True, "")],
                   floors=[StaticResult("S_j / P·V_{j-1} overlap", False, "no overlap")])
    assert hints.verdict_keys(both) == ["conflict-free tile layout", "static", "S_j / P·V_{j-1} overlap", "concept"]
    timing = StaticResult("hazard analysis (CPU emulator)", False, "right on the GPU, but ...: the code relies on "
                          "timing")
    assert hints.verdict_keys(_result(run_status="ok", hazards=timing)) == ["async"]


@pytest.mark.skipif(not emu_cases.can_run(specs.get("ch02_smem_tiling")), reason="no C++ compiler for the emulator")
@pytest.mark.parametrize(("mistake", "kind"), [("missing_sync_after_load", "race"),
                                               ("tiles_read_transposed", "wrong_output")])
def test_a_failed_check_of_the_learners_copy_picks_the_question(mistake: str, kind: str, state: Path,
                                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A planted mistake in the learner's own copy, checked for real on the CPU emulator: the verdict's kind is
    recorded and the question shown is the one for it (a race: the barriers; a wrong output: the indices)."""
    from tklab.grading import exercises as learner_files

    monkeypatch.setattr(learner_files, "EXERCISES", tmp_path / "exercises")
    (tmp_path / "exercises").mkdir(exist_ok=True)
    mutation = next(m for m in planted.load("ch02_smem_tiling") if m.name == mistake)
    mine = tmp_path / "exercises" / "ch02_smem_tiling.cu"
    mine.write_text(planted.apply(planted.solution("ch02_smem_tiling").read_text(), mutation))
    res = check("ch02_smem_tiling", mine, bench=False)
    assert res.passed is False and hints.verdict_keys(res)[0] == kind, res.summary
    assert json.loads(state.read_text())["ch02_smem_tiling"]["verdict"] == hints.verdict_keys(res)
    q = tklab.hint("ch02_smem_tiling", level=2)
    assert q.rung == "question" and q.text == hints.ladder("ch02_smem_tiling").questions[kind]


def test_a_hints_file_without_a_question_is_an_error_naming_the_file_and_key(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch):
    real = hints.hints_file(specs.get("ch02_smem_tiling")).read_text()
    f = tmp_path / "hints.toml"
    monkeypatch.setattr(hints, "hints_file", lambda spec: f)
    data = tomllib.loads(real)
    f.write_text("".join(f"{k} = {json.dumps(data[k])}\n" for k in ("concept", "level1", "level2")))
    with pytest.raises(ValueError, match=r"hints\.toml: no question \(the key 'question'"):
        hints.ladder("ch02_smem_tiling")
    f.write_text(real + '\n"a check it does not have" = "What?"\n')
    with pytest.raises(ValueError, match=r"hints\.toml: \[questions\] key 'a check it does not have' is neither"):
        hints.ladder("ch02_smem_tiling")
    f.write_text(real)
    assert hints.ladder("ch02_smem_tiling").questions["race"]


def test_the_note_says_what_is_unlocked_already(state: Path):
    """Three failed checks open the question and the recipe: the concept shown next says the question is there,
    not that it needs a failed check."""
    for _ in range(3):
        hints.record_failure("ch05_mma")
    first = tklab.hint("ch05_mma")
    assert first.level == 1 and "unlocks after" not in first.note
    assert first.note == ("Level 2 (a question about your last failed check) is unlocked: tklab.hint('ch05_mma') "
                          "shows it.")
    assert tklab.hint("ch05_mma").rung == "question" and tklab.hint("ch05_mma").rung == "recipe"


def test_a_broken_state_file_costs_the_memory_not_the_hint(state: Path):
    state.parent.mkdir(parents=True)
    state.write_text("{not json")
    assert tklab.hint("ch02_sectors").level == 1
    assert json.loads(state.read_text())["ch02_sectors"]["seen"] == 1
    state.write_text('{"ch02_sectors": {"seen": "4", "failed": true, "verdict": "race", "shown": [1, {"rung": "x"}]}}')
    assert tklab.hint("ch02_sectors").level == 1 and hints.shown("ch02_sectors")[-1]["rung"] == "concept"


def test_a_state_from_the_three_level_ladder_keeps_what_was_seen(state: Path):
    """Before the question rung, levels 2 and 3 were the recipe and the code: a learner who had seen them keeps
    them (the state says so by its missing ``ladder``)."""
    state.parent.mkdir(parents=True)
    state.write_text('{"ch05_mma": {"seen": 2, "failed": 1, "asked": 0}, "ch06_tiles": {"seen": 3}}')
    assert hints.reached("ch05_mma") == 3 and hints.reached("ch06_tiles") == 4
    assert tklab.hint("ch05_mma").rung == "recipe"
    assert hints.reached("ch05_mma") == 3  # written back as the four-rung ladder: not moved again


def test_a_failed_check_shows_the_concept_and_only_the_learners_copy_counts(state: Path, tmp_path: Path,
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
    recorded = json.loads(state.read_text())["ch04_bank_passes"]
    assert recorded["failed"] == 1 and recorded["verdict"] == hints.verdict_keys(res) and recorded["verdict"]
    elsewhere = tmp_path / "ch04_bank_passes.py"  # a file outside exercises/ (a grader's copy): no state
    elsewhere.write_text("def bank_passes(stride):\n    pass\n")
    assert check("ch04_bank_passes", elsewhere, run=False).passed is False
    assert json.loads(state.read_text())["ch04_bank_passes"]["failed"] == 1
    passed = check("ch04_bank_passes", ROOT / "solutions" / "drills" / "ch04_bank_passes.py", run=False)
    assert passed.hint == ""


def test_the_rung_a_student_reached_is_read_from_their_folder(tmp_path: Path):
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
    assert "hint 1/4, concept" in out and "python -m tklab hint ch09_block_kind --more" in out  # the command's words
    assert "more=True" not in out and "tklab.hint(" not in out
    assert main(["hint", "ch09_block_kind", "--more"]) == 0
    assert "hint 2/4, question" in capsys.readouterr().out
    assert main(["hint", "ch09_block_kind", "--level", "4"]) == 0
    out = capsys.readouterr().out
    assert "not unlocked" in out and "--more" in out and "more=True" not in out
    assert main(["hint", "ch09_block_kind", "--level", "question"]) == 0
    assert "hint 2/4, question" in capsys.readouterr().out
    assert main(["hint", "ch09_block_kind", "--level", "answer"]) == 2
    assert "concept, question, recipe, code" in capsys.readouterr().err
    assert main(["hint", "ch99"]) == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.nvrtc  # run=False: the bank conflict is found by NVRTC's compile-time probe
def test_a_typical_mistake_gets_the_concept_not_the_line(state: Path, tmp_path: Path):
    """ch04 with the plain row-major layout (every column in one bank): FAILED, with rung 1 of the ladder,
    which names banks and columns but holds no answer line."""
    f = tmp_path / "ch04_swizzle.cu"
    src = (ROOT / specs.get("ch04_swizzle").solution).read_text()
    line = answer("ch04_swizzle", "^")  # the swizzled index; the mistake drops the XOR
    plain = re.sub(r"\((\w+) \^ \w+\)", r"\1", line)
    assert plain != line and line in src
    f.write_text(src.replace(line, plain))
    res = check("ch04_swizzle", f, run=False)
    assert res.passed is False and "bank" in res.hint
    assert not spoilers.scan(res.hint, spoilers.answer_lines(specs.get("ch04_swizzle")))
    assert hints.verdict_keys(res)[:2] == ["conflict-free tile layout", "static"]
