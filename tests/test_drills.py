"""Drills: every reference answer agrees with the hardware model on its whole domain, every untouched drill
fails for its reason, and planted typical mistakes (two per drill) fail. One drill goes the whole way through
``tklab.check`` (sandboxed child, verdict in the parent) passing and failing; the rest are judged in-process
with the same answers/reference/compare the check uses, so the suite stays fast."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from scripts import load_script

from tklab.grading import drills, specs
from tklab.grading.check import check
from tklab.grading.exercises import regions
from tklab.grading.judge import compare

ROOT = Path(__file__).resolve().parent.parent
DRILLS = [i for i in specs.all_ids() if specs.get(i).kind == "drill"]

# Typical wrong answers: (what the mistake is, the function's body -- or, where the mistake is a small change of the
# right answer, the edits (old, new) that make it from the solution's body, read from solutions/drills/ at run time, so
# no answer line is written here: tests/test_answers_nowhere.py). Each must fail on the drill's domain.
Edits = list[tuple[str, str]]
PLANTED: dict[str, list[tuple[str, str | Edits]]] = {
    "ch02_sectors": [
        ("counts 128-byte lines, not 32-byte sectors",
         "return len({(l * stride * itemsize) // 128 for l in range(32)})"),
        ("forgets the element size", "return len({(l * stride) // 32 for l in range(32)})"),
    ],
    "ch03_blocks_per_sm": [
        ("one pool of registers, no quadrants",
         [("warps_per_quadrant * 4 // warps if launchable else 0", "65536 // (per_warp * warps)")]),
        ("forgets the 1 KB reserved per block", [("* 128 + 1024)", "* 128)")]),
    ],
    "ch04_bank_passes": [
        ("counts lanes, not distinct words (no broadcast)", [("{lane * stride for lane in range(32)}",
                                                              "[lane * stride for lane in range(32)]")]),
        ("the gcd rule without the broadcast of stride 0", "import math\nreturn math.gcd(stride, 32)"),
    ],
    "ch04_padding": [
        ("always pads by one", "return cols + 1"),
        ("pads only multiples of 32", "return cols + 1 if cols % 32 == 0 else cols"),
    ],
    "ch05_mma_owner": [
        ("column half before row half", """
g, t = row % 8, (col % 8) // 2
return 4 * g + t, 2 * (2 * (row // 8) + col // 8) + col % 2"""),
        ("lane = 4 t + g (transposed)", """
g, t = row % 8, (col % 8) // 2
return 4 * t + g, 2 * (row // 8 + 2 * (col // 8)) + col % 2"""),
    ],
    "ch05_ldmatrix": [
        ("rows by lane % 8", "return i // 2, lane % 8, 2 * (lane // 8) + i % 2"),
        ("matrix from the element, not the register", "return i % 4, lane // 4, 2 * (lane % 4) + i // 4"),
    ],
    "ch06_rt_layout": [
        ("registers 1 and 2 swapped", [("8 * (register % 2), 2 * t + half + 8 * (register // 2)",
                                        "8 * (register // 2), 2 * t + half + 8 * (register % 2)")]),
        ("one element per column pair", [("2 * t + half + 8", "t + 8")]),
    ],
    "ch07_mbarrier_parity": [
        ("inverted: returns while the phase of that parity runs", "return int((arrivals // count) % 2 == parity)"),
        ("a phase per arrival", "return int(arrivals % 2 != parity)"),
    ],
    "ch07_tma_box": [
        ("the span ignores the swizzle's row pitch", """
row = cols * itemsize
if row % 16 or (swizzle and row > swizzle):
    return (-1, -1)
return (rows * row, rows * row)"""),
        ("expects the bytes the rows span", """
row = cols * itemsize
if row % 16 or (swizzle and row > swizzle):
    return (-1, -1)
pitch = swizzle or row
return (rows * pitch, rows * pitch)"""),
    ],
    "ch08_descriptor": [
        ("swizzle codes reversed", [("128: 1, 64: 2, 32: 3", "128: 3, 64: 2, 32: 1")]),
        ("fields in bytes, not 16-byte units", [("& 0x3FFFF) >> 4", "& 0x3FFF)")]),
    ],
    "ch08_register_split": [
        ("counts a warp's 32 threads, not a warpgroup's 128", [("65536 // 128", "65536 // 32")]),
        ("not a multiple of 8", [("left // consumers // 8 * 8", "left // consumers")]),
    ],
    "ch09_block_kind": [
        ("masks against the last row instead of the first", [("last_key > i * block_rows", "last_key > last_row")]),
        ("forgets keys past the end of the sequence", [("last_key >= seq or (causal and last_key > i * block_rows)",
                                                        "causal and last_key > i * block_rows")]),
    ],
    "ch11_dq_shares": [
        ("counts per row, not per query block (a diagonal block's share reaches every row of it)", """
return row // block_keys + 1 if causal else -(-seq // block_keys)"""),
        ("the end of the query block, not its last row (one key block too many on a boundary)", """
if not causal:
    return -(-seq // block_keys)
return min((row // 64 + 1) * 64, seq) // block_keys + 1"""),
        ("every key block even under the mask", "return -(-seq // block_keys)"),
    ],
    "ch10_wgmma_owner": [
        ("forgets the warp's 32-thread offset", """
r = row % 16
return 4 * (r % 8) + (col % 8) // 2, 4 * (col // 8) + 2 * (r // 8) + col % 2"""),
        ("lower 8 rows in the next 8-column register block", [("2 * (r // 8)", "(r // 8)")]),
    ],
}


def _judge(exercise: str, fn) -> dict:
    """What the check's parent concludes from ``fn``'s answers (the same inputs, reference and compare)."""
    spec = specs.get(exercise)
    dims = spec.cases[0]
    x = spec.inputs(None, dims)
    got = drills.answers(spec, fn, x, dims)
    return compare("answer", got, spec.reference(x, dims)["answer"], spec.rtol, spec.atol)


def _planted(exercise: str, mistake: str | Edits):
    """The learner's function with the mistake: its body as written, or the solution's body with the edits made
    (each edit's old text must be in it once, so a solution that changes cannot leave a planted mistake unmade)."""
    spec = specs.get(exercise)
    args = ", ".join(drills.params(spec))
    if isinstance(mistake, str):
        body = mistake
    else:
        solution = (ROOT / spec.solution).read_text()
        (region,) = regions(solution, ".py", spec.solution)
        body = "\n".join(region.body)
        for old, new in mistake:
            assert body.count(old) == 1, f"{exercise}: the edit's {old!r} is not once in the solution's body"
            body = body.replace(old, new)
    src = f"def {spec.kernel}({args}):\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"
    scope: dict = {}
    exec(compile(src, f"<planted {exercise}>", "exec"), scope)  # noqa: S102 - the test's own planted code
    return scope[spec.kernel]


def test_every_chapter_02_to_10_ends_with_two_checked_exercises_or_drills():
    per_chapter: dict[str, int] = {}
    for i in specs.all_ids():
        per_chapter[specs.get(i).chapter] = per_chapter.get(specs.get(i).chapter, 0) + 1
    assert len(DRILLS) >= 12
    assert all(per_chapter.get(f"{c:02d}", 0) >= 2 for c in range(2, 11)), per_chapter
    assert set(PLANTED) == set(DRILLS), "every drill has its planted mistakes"


@pytest.mark.parametrize("exercise", DRILLS)
def test_reference_answer_agrees_with_the_model_and_planted_mistakes_fail(exercise):
    spec = specs.get(exercise)
    solution = load_script(ROOT / spec.solution, f"solution_{exercise}")
    assert _judge(exercise, getattr(solution, spec.kernel))["ok"]
    for what, body in PLANTED[exercise]:
        verdict = _judge(exercise, _planted(exercise, body))
        assert not verdict["ok"], f"{exercise}: the planted mistake '{what}' passes"


@pytest.mark.parametrize("exercise", DRILLS)
def test_untouched_drill_fails_its_static_check(exercise):
    res = check(exercise, run=False)
    name, words = specs.get(exercise).untouched
    failed = {s.name: s.detail for s in res.static if not s.ok}
    assert res.passed is False and name in failed and words in failed[name], res
    assert res.hint and "tklab.hint" in res.hint  # the level-1 hint, shown on FAILED


def test_a_drill_goes_through_the_sandboxed_check(tmp_path):
    ok = check("ch07_mbarrier_parity", ROOT / "solutions" / "drills" / "ch07_mbarrier_parity.py")
    assert ok.passed is True and ok.established == "cpu" and "all 104 cases" in ok.run_message, ok
    wrong = tmp_path / "ch07_mbarrier_parity.py"
    wrong.write_text("def wait_returns(arrivals, count, parity):\n    return int(arrivals % 2 != parity)\n")
    res = check("ch07_mbarrier_parity", wrong)
    assert res.passed is False and res.run_status == "wrong" and res.established == "cpu", res
    assert any(n.startswith("first wrong answer: wait_returns(arrivals=") for n in res.notes), res


def test_a_drill_that_returns_nonsense_gets_a_clear_error(tmp_path):
    spec = specs.get("ch05_mma_owner")
    with pytest.raises(TypeError, match="2 expected"):
        drills.answers(spec, lambda row, col: row, spec.inputs(None, spec.cases[0]), spec.cases[0])
    with pytest.raises(TypeError, match="whole numbers"):
        drills.answers(spec, lambda row, col: ("a", 1), spec.inputs(None, spec.cases[0]), spec.cases[0])


def test_wide_answers_are_compared_exactly():
    """A descriptor is 64 bits: a float64 holds only 53, so the answer travels as two 32-bit halves."""
    spec = specs.get("ch08_descriptor")
    dims = spec.cases[0]
    x = spec.inputs(None, dims)
    ref = spec.reference(x, dims)["answer"]
    solution = load_script(ROOT / spec.solution, "solution_descriptor")
    off_by_one = drills.answers(spec, lambda *a: solution.descriptor(*a) ^ 1, x, dims)
    assert ref.shape == (dims["n"], 2) and np.all(ref < 2**32)
    assert not compare("answer", off_by_one, ref, 0.0, 0.0)["ok"]
