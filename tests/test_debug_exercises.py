"""Debugging exercises (issue 42, item 1): a working-looking program with one bug, generated from its solution's bug
regions (``// BEGIN BUG hint: ...`` / right lines / ``// BUG: <buggy line>`` / ``// END BUG``,
``tklab.grading.exercises``). The exercise file hides where the bug is (it differs from the solution without markers
only at the buggy lines, and nothing beside them says BUG, TODO or fix); the hint ladder's answer is the fix as a
diff; the untouched file is judged as the program it is ("the file as given"), never "not started"; a malformed
region is an error naming its file and line; every debugging exercise has its planted suite (the file as given
fails, the fix passes, wrong fixes fail) and a link from its chapter."""

from __future__ import annotations

import json
import re
from pathlib import Path

import planted
import pytest

from tklab.grading import exercises, hints, index, specs, untouched
from tklab.grading.exercises import RegionError

ROOT = Path(__file__).resolve().parent.parent
DEBUG = [i for i in specs.all_ids() if specs.get(i).kind == "debug"]
MARKER = re.compile(r"^\s*//\s*(BEGIN BUG|END BUG|BUG:)")


def _files(exercise: str) -> tuple[str, str, list[str]]:
    """The solution's text, the exercise's file, and the solution without its marker lines (the right program)."""
    spec = specs.get(exercise)
    solution = (ROOT / spec.solution).read_text()
    given = (ROOT / "exercises" / spec.exercise_file).read_text()
    right = [line for line in solution.splitlines() if not MARKER.match(line)]
    return solution, given, right


def _body(given: str) -> list[str]:
    """The exercise's lines below its generated header (the header ends at its 'Stuck?' line)."""
    lines = given.splitlines()
    return lines[next(n for n, line in enumerate(lines) if "Stuck? tklab.hint" in line) + 1:]


def test_chapters_02_to_06_have_a_debugging_exercise_each():
    assert {specs.get(i).chapter for i in DEBUG} >= {"02", "03", "04", "05", "06"}
    for i in DEBUG:
        assert exercises.DEBUG in i and exercises.is_debug(i) and specs.get(i).kind == "debug", i
    assert not any(exercises.is_debug(i) for i in specs.all_ids() if i not in DEBUG)
    assert specs.find("ch02").id == "ch02_smem_tiling"  # a chapter prefix still names the chapter's own exercise


@pytest.mark.parametrize("exercise", DEBUG)
def test_the_exercise_differs_from_the_solution_only_at_the_buggy_lines(exercise: str):
    solution, given, right = _files(exercise)
    spec = specs.get(exercise)
    assert given == exercises.stub(spec), f"{exercise}: exercises/ is stale"
    body = _body(given)
    found = [r for r in exercises.regions(solution, ".cu", exercise) if r.bug]
    assert found and all(r.bug for r in exercises.regions(solution, ".cu", exercise))
    # walk the solution: outside the regions its lines, inside a region its buggy lines, noting where they went
    expected: list[str] = []
    spans: list[tuple[int, int]] = []
    lines = solution.splitlines()
    at = 0
    for r in found:
        expected += [ln for ln in lines[at:r.begin - 1]]
        spans.append((len(expected), len(expected) + len(r.stub)))
        expected += list(r.stub)
        at = r.end
    expected += lines[at:]
    assert body == expected, exercise
    # the exercise with its buggy lines replaced by the right ones is the solution without markers, line for line
    repaired = list(body)
    for (j1, j2), r in reversed(list(zip(spans, found, strict=True))):
        repaired[j1:j2] = list(r.body)
    assert repaired == right, exercise
    changed = [(j1, j2) for j1, j2 in spans]
    # the fixed file is the right program under the same header
    assert _body(exercises.fixed(solution, exercises.source_name(spec), ".cu")) == right
    # nothing near the bug points at it, and no marker is left anywhere
    for j1, j2 in changed:
        near = body[max(0, j1 - 3):j2 + 3]
        assert not [ln for ln in near if re.search(r"\b(bug|todo|fix|fixme)\b", ln, re.I)], (exercise, near)
    assert not [ln for ln in body if re.search(r"\bBUG\b|\bTODO\b|BEGIN|END BUG", ln)], exercise


@pytest.mark.parametrize("exercise", DEBUG)
def test_the_answer_rung_is_the_fix_as_a_diff(exercise: str):
    solution, given, right = _files(exercise)
    answer = hints.answer(specs.get(exercise))  # the last rung: the answer
    assert f"exercises/{specs.get(exercise).exercise_file} (as given)" in answer
    diff = answer.split("\n", 1)[1] + "\n"
    assert _patched(given, diff) == exercises.fixed(solution, exercises.source_name(specs.get(exercise)), ".cu")
    assert "TODO" not in answer and re.search(r"^-", diff, re.M)


def test_the_answer_rung_says_it_is_the_fix(tmp_path: Path):
    """Asked for, the last rung's note calls it the fix of the file as given (a debugging exercise has no TODOs);
    a fill-in exercise's says it is the reference solution's code for the TODOs."""
    state = tmp_path / ".hints.json"
    for _ in range(hints.LEVELS):
        shown = hints.hint(DEBUG[0], more=True, state=state)
    assert shown.level == hints.LEVELS and "the fix, as a diff of your file as it was given" in shown.note
    for _ in range(hints.LEVELS):
        shown = hints.hint("ch02_smem_tiling", more=True, state=state)
    assert "the reference solution's code for the TODOs" in shown.note


def _patched(text: str, diff: str) -> str:
    """``text`` with a unified diff applied: each hunk's old lines, found at the line its header names, replaced by
    its new lines (a test's own reading of the diff, so a wrong line number or a wrong line fails)."""
    lines = text.splitlines()
    hunks = re.split(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@\n", diff.split("\n", 2)[2], flags=re.M)[1:]
    shift = 0
    for start, body in zip(hunks[0::2], hunks[1::2], strict=True):
        old = [ln[1:] for ln in body.splitlines() if ln[:1] in (" ", "-")]
        new = [ln[1:] for ln in body.splitlines() if ln[:1] in (" ", "+")]
        at = int(start) - 1 + shift
        assert lines[at:at + len(old)] == old, (start, old)
        lines[at:at + len(old)] = new
        shift += len(new) - len(old)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("exercise", DEBUG)
def test_the_untouched_file_is_judged_as_the_program_it_is(exercise: str):
    spec = specs.get(exercise)
    _, given, right = _files(exercise)
    where = untouched.standing(spec, given)
    assert where.not_started == "" and where.as_given == untouched.AS_GIVEN and not where.changed
    assert not re.search(r"\bline\b|\bTODO\b", where.as_given)  # never where: no line, no TODO
    respaced = "// my notes\n" + "\n".join("  " + ln + "  " for ln in given.splitlines()) + "\n"
    assert untouched.standing(spec, respaced).as_given  # comments and spacing do not count as a change
    fixed = untouched.standing(spec, exercises.fixed((ROOT / spec.solution).read_text(), exercises.source_name(spec),
                                                     ".cu"))
    assert fixed.started and not fixed.as_given and not fixed.changed and fixed.changed_text == ""


def test_a_check_of_the_untouched_file_reports_what_it_did(tmp_path: Path):
    """The real check of a debugging exercise's untouched file: FAILED on what the program did (here the emulator's
    race), with the note that this is the file as given; no "not started", no TODO, no line of the bug named."""
    from tklab.grading import cases
    from tklab.grading.check import check

    spec = specs.get("ch02_debug_vecmat")
    if not cases.can_run(spec):
        pytest.skip("no C++ compiler for the emulator")
    res = check(spec.id, ROOT / "exercises" / spec.exercise_file, bench=False)
    assert res.passed is False and not res.not_started and "race" in res.summary, res.summary
    assert untouched.AS_GIVEN in res.notes
    text = "\n".join(res.messages)
    assert "not started" not in text and "TODO" not in text and "fill in" not in text


SOURCE = "solutions/ch99_debug_x/ch99_debug_x.cu"
GOOD = """\
__global__ void k(float* y) {
    // BEGIN BUG hint: y[i] = 2
    y[threadIdx.x] = 2.0f;
    // BUG: y[threadIdx.x] = 1.0f;
    // END BUG
}
"""


def test_a_region_renders_hidden_and_its_fix_is_a_diff():
    out = exercises.render(GOOD, SOURCE, ".cu")
    assert _body(out) == ["__global__ void k(float* y) {", "    y[threadIdx.x] = 1.0f;", "}"]
    assert "What it should do: y[i] = 2" in out
    assert exercises.fixed(GOOD, SOURCE, ".cu") == out.replace("1.0f", "2.0f")
    diff = exercises.fix_diff(GOOD, SOURCE, ".cu", "x.cu")
    assert "-    y[threadIdx.x] = 1.0f;\n+    y[threadIdx.x] = 2.0f;\n" in diff
    missing = GOOD.replace("    // BUG: y[threadIdx.x] = 1.0f;\n", "")  # no BUG line: the right line is missing
    assert "y[threadIdx.x]" not in exercises.render(missing, SOURCE, ".cu")


@pytest.mark.parametrize(("text", "line", "says"), [
    (GOOD.replace("    // END BUG\n", ""), 2, "never closed"),
    (GOOD.replace("    // BEGIN BUG hint: y[i] = 2\n", ""), 3, "a STUB or BUG line outside any region"),
    (GOOD.replace("    // BUG: y[threadIdx.x] = 1.0f;\n    // END BUG\n", "    // END BUG\n    // END BUG\n"), 5,
     "END BUG without a BEGIN BUG"),
    (GOOD.replace("    y[threadIdx.x] = 2.0f;\n", "    // BEGIN BUG\n"), 3, "inside the region opened at line 2"),
    (GOOD.replace("1.0f", "2.0f"), 2, "buggy lines are its right lines"),
    (GOOD.replace("// BUG: y", "// BUG:     y"), 2, "indented"),
    (GOOD + "// BEGIN SOLUTION\n// END SOLUTION\n", 7, "not both"),
    (GOOD.replace("    // BUG: y[threadIdx.x] = 1.0f;", "    // BUG: y[threadIdx.x] = 1.0f;  // fixed later"), 2,
     "near the bug"),
    (GOOD.replace("    // BUG: y[threadIdx.x] = 1.0f;", "    // STUB: y[threadIdx.x] = 1.0f;"), 4,
     "inside a BUG region"),
])
def test_a_malformed_region_is_an_error_naming_the_file_and_line(text: str, line: int, says: str):
    with pytest.raises(RegionError, match=rf"^{re.escape(SOURCE)}:{line}: .*{re.escape(says)}"):
        exercises.render(text, SOURCE, ".cu")


def test_bug_regions_need_a_debugging_exercises_id():
    with pytest.raises(RegionError, match=r"ch99_x.cu:2: .*_debug_"):
        exercises.render(GOOD, "solutions/ch99_x/ch99_x.cu", ".cu")


@pytest.mark.parametrize("exercise", DEBUG)
def test_the_planted_suite_holds_the_file_as_given_the_fix_and_wrong_fixes(exercise: str):
    suite = planted.suite(exercise)
    base = planted.base(exercise)
    assert base == exercises.stub(specs.get(exercise))  # the suite edits the program the learner is given
    as_given = [m for m in suite.mutations if not m.edits]
    assert len(as_given) == 1 and not as_given[0].benign, exercise
    wrong = [m for m in suite.mutations if m.edits and not m.benign]
    assert len(wrong) >= 2, f"{exercise}: at least two wrong fixes"
    solution, _, right = _files(exercise)
    code = [c for c in untouched._code("\n".join(right), ".cu") if c]
    fixes = [m for m in suite.mutations if m.benign
             and [c for c in untouched._code(_body_text(planted.apply(base, m)), ".cu") if c] == code]
    assert fixes, f"{exercise}: no benign variant is the fix (the solution's program)"


def _body_text(text: str) -> str:
    return "\n".join(_body(text))


@pytest.mark.parametrize("exercise", DEBUG)
def test_its_chapter_links_it_beside_the_idea_with_its_check(exercise: str):
    spec = specs.get(exercise)
    (notebook,) = sorted((ROOT / "notebooks").glob(f"{spec.chapter}_*.ipynb"))
    cells = json.loads(notebook.read_text())["cells"]
    link = f"[exercises/{spec.exercise_file}](../exercises/{spec.exercise_file})"
    linking = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown" and link in "".join(c["source"])]
    assert linking, f"{notebook.name} has no link {link}"
    assert "**Debug**" in linking[0] and f'tklab.check("{exercise}")' in linking[0], linking[0]


def test_the_index_shows_the_kind_and_the_program_to_search():
    rows = {r.id: r for r in index.index_rows()}
    for i in DEBUG:
        assert rows[i].kind == "debug" and index.size(rows[i]) == f"find 1 bug in {rows[i].lines} lines"
        assert rows[i].lines == exercises.code_lines(exercises.stub(specs.get(i)), ".cu") > 10
    assert f"| {index.size(rows[DEBUG[0]])} |" in index.index_table()
