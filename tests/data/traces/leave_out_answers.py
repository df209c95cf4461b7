"""Leave the exercises' answer lines out of the recorded traces here (issue 42, item 3).

A trace recorded on a solution holds its source: every string of the JSON (a line's text, the file's lines) that
holds an answer line of any exercise or drill (``tklab.grading.spoilers``) becomes ``MARK``. The drawings the tests
hold (roles of warps, wgmma ids, misaligned rows, long lines) do not read those lines' words. Run it on a newly
recorded trace before adding it: ``python tests/data/traces/leave_out_answers.py tests/data/traces/*.json``;
``tests/test_answers_nowhere.py`` fails on a trace that still holds one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tklab.grading import specs, spoilers

MARK = "(a line of an exercise's answer, left out of this recorded trace)"


def leave_out(value: Any, answers: dict[str, str]) -> tuple[Any, int]:
    """``value`` with every string holding an answer line replaced by ``MARK``, and how many were."""
    if isinstance(value, str):
        return (MARK, 1) if spoilers.scan(value, answers) else (value, 0)
    if isinstance(value, list):
        done = [leave_out(v, answers) for v in value]
        return [v for v, _ in done], sum(n for _, n in done)
    if isinstance(value, dict):
        done = {k: leave_out(v, answers) for k, v in value.items()}
        return {k: v for k, (v, _) in done.items()}, sum(n for _, n in done.values())
    return value, 0


def main(paths: list[str]) -> None:
    answers: dict[str, str] = {}
    for exercise in specs.all_ids():
        answers.update(spoilers.answer_lines(specs.get(exercise)))
    for p in map(Path, paths):
        out, n = leave_out(json.loads(p.read_text()), answers)
        p.write_text(json.dumps(out, separators=(",", ":")))  # the recorder's own compact form
        print(f"{p}: {n} answer line(s) left out")


if __name__ == "__main__":
    main(sys.argv[1:])
