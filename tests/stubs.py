"""An exercise's stub with one do-nothing line written into its first TODO block (``;`` in CUDA, ``pass`` in
Python): a check then goes past "not started" (``tklab.grading.untouched``) and judges the stub's code as it
stands, which is what each spec's ``untouched`` entry says it fails on.

Public API: ``begun(exercise_id) -> str``, ``begun_file(exercise_id, folder) -> Path``.
"""

from __future__ import annotations

from pathlib import Path

from tklab.grading import specs

ROOT = Path(__file__).resolve().parent.parent


def begun(exercise: str) -> str:
    spec = specs.get(exercise)
    lines = (ROOT / "exercises" / spec.exercise_file).read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "TODO: your code here" in line)
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    lines.insert(at + 1, indent + ("pass\n" if spec.exercise_file.endswith(".py") else ";\n"))
    return "".join(lines)


def begun_file(exercise: str, folder: Path) -> Path:
    path = folder / specs.get(exercise).filename
    path.write_text(begun(exercise))
    return path
