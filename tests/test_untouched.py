"""Where a learner's file stands against its stub (tklab.grading.untouched), for every exercise and drill: the
stub is "not started" at its first TODO's line, whatever comments and spacing the learner changed; a line
written into a TODO block starts it; the solution is started and changes no given code; a given line changed,
removed or added away from the TODOs is named by its line; a file that is not the stub at all is judged as it
is. And the report of a file not started says where to write, not what its placeholders did."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import stubs

from tklab.grading import specs, untouched
from tklab.grading.exercises import rendered, source_name
from tklab.grading.spec_kit import StaticResult
from tklab.grading.verdict import CheckResult

ROOT = Path(__file__).resolve().parent.parent
IDS = [i for i in specs.all_ids() if specs.get(i).kind != "debug"]  # a debugging exercise has no TODO (below)
DEBUG = [i for i in specs.all_ids() if specs.get(i).kind == "debug"]


def _stub(exercise: str) -> tuple[list[str], list[tuple[int, int]]]:
    spec = specs.get(exercise)
    text, blocks = rendered((ROOT / spec.solution).read_text(), source_name(spec), Path(spec.solution).suffix)
    assert text == (ROOT / "exercises" / spec.exercise_file).read_text(), f"{exercise}: exercises/ is stale"
    return text.splitlines(keepends=True), blocks


def _given(exercise: str) -> int:
    """The index of a given code line (outside every TODO block) that occurs once in the stub, mid-file."""
    lines, blocks = _stub(exercise)
    inside = {n - 1 for first, last in blocks for n in range(first, last + 1)}
    python = lines[0].startswith("#")
    candidates = [i for i, line in enumerate(lines) if i not in inside and line.strip()
                  and not line.strip().startswith(("#", '"""') if python else ("//", "/*", "*"))
                  and sum(other.strip() == line.strip() for other in lines) == 1 and len(line.strip()) > 8]
    assert candidates, exercise
    return candidates[len(candidates) // 2]


@pytest.mark.parametrize("exercise", IDS)
def test_the_stub_is_not_started_at_its_todos(exercise: str) -> None:
    lines, blocks = _stub(exercise)
    where = untouched.standing(specs.get(exercise), "".join(lines))
    todos = [n for n, line in enumerate(lines, start=1) if "TODO: your code here" in line]
    assert where is not None and not where.started and not where.changed
    assert list(where.todo_lines) == todos == [first for first, _ in blocks]
    assert re.fullmatch(r"fill in the TODOs? at lines? [\d, and]+", where.not_started)
    assert where.not_started.startswith(f"fill in the TODO at line {todos[0]}" if len(todos) == 1
                                        else f"fill in the TODOs at lines {todos[0]}, " if len(todos) > 2
                                        else f"fill in the TODOs at lines {todos[0]} and {todos[1]}")


@pytest.mark.parametrize("exercise", IDS)
def test_notes_spacing_and_moved_comments_do_not_start_it(exercise: str) -> None:
    lines, blocks = _stub(exercise)
    comment = "#" if lines[0].startswith("#") else "//"
    edited = [("    " + line.rstrip("\n") + "   \n") if line.strip() and not line.lstrip().startswith('"""')
              and not lines[0].startswith("#") else line for line in lines]  # re-indented (C++ only: Python cares)
    first = blocks[0][0] - 1
    edited.insert(first, f"{comment} my notes: what this loop does\n\n")
    edited.append(f"\n{comment} more notes at the end\n")
    where = untouched.standing(specs.get(exercise), "".join(edited))
    assert not where.started and not where.changed, where


@pytest.mark.parametrize("exercise", IDS)
def test_a_line_written_in_a_todo_starts_it_and_the_solution_changes_no_given_code(exercise: str) -> None:
    spec = specs.get(exercise)
    begun = untouched.standing(spec, stubs.begun(exercise))
    assert begun.started and not begun.changed and begun.not_started == ""
    solution = untouched.standing(spec, (ROOT / spec.solution).read_text())
    assert solution.started and not solution.changed


@pytest.mark.parametrize("exercise", IDS)
def test_given_code_changed_removed_or_added_is_named_by_its_line(exercise: str) -> None:
    spec = specs.get(exercise)
    solution = (ROOT / spec.solution).read_text().splitlines(keepends=True)
    lines, _ = _stub(exercise)
    at = _given(exercise)
    # the same given line in the solution (which has no generated header line, and its regions' own lines)
    target = next(i for i, line in enumerate(solution) if line.strip() == lines[at].strip())
    indent = solution[target][: len(solution[target]) - len(solution[target].lstrip())]
    changed = [*solution[:target], indent + "changed_by_the_learner = 1\n", *solution[target + 1:]]
    where = untouched.standing(spec, "".join(changed))
    assert where.started and [n for n, _ in where.changed] == [target + 1], where
    assert where.changed_text.startswith(f"you changed given code at line {target + 1} (`changed_by_the_learner")
    without = "".join([*solution[:target], *solution[target + 1:]])
    removed = untouched.standing(spec, without)  # named at the next line of code, the place it was taken from
    after = next(n for n, code in enumerate(untouched._code(without, Path(spec.solution).suffix), start=1)
                 if n > target and code)
    assert removed.changed == ((after, ""),) and "a given line removed just above it" in removed.changed_text
    first = next(n for n, code in enumerate(untouched._code("".join(solution), Path(spec.solution).suffix)) if code)
    added = untouched.standing(spec, "".join([*solution[:first], "added_by_the_learner = 2\n", *solution[first:]]))
    assert added.changed == ((first + 1, "added_by_the_learner = 2"),), added
    # the stub with the same change: not started, and the change named
    stub = [*lines[:at], lines[at][: len(lines[at]) - len(lines[at].lstrip())] + "changed_by_the_learner = 1\n",
            *lines[at + 1:]]
    both = untouched.standing(spec, "".join(stub))
    assert not both.started and [n for n, _ in both.changed] == [at + 1]


@pytest.mark.parametrize("text", ["// not even a kernel\n", "", "__global__ void mine() {}\n"])
def test_a_file_that_is_not_the_stub_is_judged_as_it_is(text: str) -> None:
    where = untouched.standing(specs.get("ch05_mma"), text)
    assert where.started and where.not_started == ""


def test_the_report_of_a_file_not_started_says_where_to_write() -> None:
    res = CheckResult("ch04_swizzle", "A transpose", "exercises/ch04_swizzle.cu", compiled=True, passed=False,
                      run_status="error", run_message="SharedRace: shared-memory race ... a missing __syncthreads()",
                      static=[StaticResult("conflict-free tile layout", False, "not one-to-one")],
                      not_started="fill in the TODO at line 26", hint="Shared memory has 32 banks ...")
    text = repr(res)
    assert text.splitlines()[1] == "  ✘ not started: fill in the TODO at line 26"
    assert text.splitlines()[-1] == "FAILED: not started: fill in the TODO at line 26"
    assert "SharedRace" not in text and "one-to-one" not in text and "hint: Shared memory" in text
    assert "SharedRace" not in res._repr_html_() and "not started" in res._repr_html_()
    res.given_changed = "you changed given code at line 12 (`int x = 1;`): ..."
    assert "· given code: you changed given code at line 12" in repr(res)
    started = CheckResult("ch04_swizzle", "A transpose", "f.cu", compiled=True, passed=False, run_status="error",
                          run_message="SharedRace", given_changed="you changed given code at line 12 (`x`)")
    assert "· given code: you changed given code at line 12" in repr(started) and "SharedRace" in repr(started)


@pytest.mark.parametrize("exercise", DEBUG)
def test_a_debugging_exercise_is_judged_as_given_never_not_started(exercise: str) -> None:
    """A debugging exercise has no TODO: its untouched file is a program to judge ("the file as given"), with no
    line named; a line changed anywhere (the learner's repair) is the learner's, not "given code changed"."""
    spec = specs.get(exercise)
    text = (ROOT / "exercises" / spec.exercise_file).read_text()
    where = untouched.standing(spec, text)
    assert where is not None and where.debug and not where.started and where.not_started == ""
    assert where.as_given == untouched.AS_GIVEN and "line" not in where.as_given and "TODO" not in where.as_given
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "__global__" in line) + 2
    edited = untouched.standing(spec, "".join([*lines[:at], "    int changed_by_the_learner = 1;\n", *lines[at:]]))
    assert edited.started and not edited.as_given and not edited.changed and edited.changed_text == ""
    res = CheckResult(exercise=exercise, title="", path="")
    untouched.judge(res, spec, text)
    assert res.not_started == "" and res.notes[0] == untouched.AS_GIVEN and res.given_changed == ""
