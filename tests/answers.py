"""An exercise's answer lines, read from its solution at run time, for the tests that edit or look for one.

A test names the line by fragments that are no answer by themselves (``answer("ch04_swizzle", "^")``), so no test
file holds an answer line (``tests/test_answers_nowhere.py``) and a solution that changes is followed, not copied.
"""

from __future__ import annotations

from pathlib import Path

from tklab.grading import specs
from tklab.grading.exercises import COMMENT, regions

ROOT = Path(__file__).resolve().parent.parent


def answer(exercise: str, *fragments: str) -> str:
    """The one code line of the exercise's solution regions that holds every fragment, stripped, without its
    comment -- a substring of the solution's text. Fails, naming them, on none or on several."""
    spec = specs.get(exercise)
    path = ROOT / spec.solution
    prefix = COMMENT[path.suffix]
    found = {line.split(f" {prefix} ")[0].strip() for r in regions(path.read_text(), path.suffix, spec.solution)
             for line in r.body if all(f in line.split(f" {prefix} ")[0] for f in fragments)}
    if len(found) != 1:
        raise LookupError(f"{exercise}: {len(found)} answer lines hold {fragments!r}: {sorted(found)}")
    return found.pop()
