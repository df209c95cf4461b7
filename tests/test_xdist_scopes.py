"""`make test` runs pytest on every core with the scopes of tests/conftest.py (``xdist_scope``): a module stays on
one worker, and each exercise's planted suite is a scope of its own. Were the planted test renamed, or its ids
changed, the suites would silently fall back to one scope (one worker): this says so instead."""

from __future__ import annotations

import planted
import test_planted_mistakes as suite
from conftest import _PLANTED, xdist_scope


def test_each_exercise_s_planted_suite_is_a_scope_of_its_own() -> None:
    name = suite.test_planted_mistake_fails_and_benign_variant_passes.__name__
    assert _PLANTED == f"tests/{suite.__name__}.py::{name}["
    by_scope: dict[str, set[str]] = {}
    for m in suite.ALL:  # the suite's ids: ``m.id``, "<exercise>:<name>"
        by_scope.setdefault(xdist_scope(f"{_PLANTED}{m.id}]"), set()).add(m.exercise)
    assert by_scope == {f"planted-{e}": {e} for e in planted.exercises()}


def test_other_tests_keep_to_their_module() -> None:
    for nodeid in ("tests/test_hub.py::test_two_students_on_one_hub", "tests/test_grade.py::Sheet::test_row[a::b]",
                   "tests/test_planted_mistakes.py::test_every_anchor_is_code_found_exactly_once"):
        assert xdist_scope(nodeid) == nodeid.split("::")[0]
