"""The class sample as a class folder: the submissions stored in ``tests/data/class_sample`` plus those made here
from a solution, so that no answer line lies in ``tests/`` (``tests/test_answers_nowhere.py``).

A made submission is its exercise's solution with one mistake, an edit in ``tests/planted.py``'s format (its anchor
must occur once in the solution, or ``planted.AnchorError`` names it): the file follows the solution when it changes,
and the mistake -- hence the verdict the tests expect -- stays the same.

    python tests/sample_class.py DEST    # the whole sample, for ``python -m tklab grade --class DEST``
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

import planted

SAMPLE = Path(__file__).resolve().parent / "data" / "class_sample"

#: (student, exercise) -> the one mistake that student's file makes in the exercise's solution.
MADE: dict[tuple[str, str], planted.Mutation] = {
    ("carol", "ch02_smem_tiling"): planted.Mutation(
        "ch02_smem_tiling", "store_far_outside_c",
        "the tiling is right, but the store's row stride is a million rows: it writes far outside C (an illegal "
        "address on a GPU, an out-of-bounds write of C the emulator names)", False,
        ({"find": "C[row * N + col] = acc;", "replace": "C[(size_t)row * N * 1000000 + col] = acc;"},)),
}


def made(student: str, exercise: str) -> str:
    """The text of one made submission: the exercise's solution with the student's mistake applied."""
    return planted.apply(planted.solution(exercise).read_text(), MADE[student, exercise])


def copy(dest: Path, students: Iterable[str] | None = None) -> Path:
    """The sample (all of it, or only the students named, each a folder of ``dest``), stored and made submissions
    together."""
    students = None if students is None else tuple(students)
    if students is None:
        shutil.copytree(SAMPLE, dest, symlinks=True, dirs_exist_ok=True)
        students = tuple(s for s, _ in MADE)
    else:
        dest.mkdir(parents=True, exist_ok=True)
        for student in students:
            if (SAMPLE / student).is_dir():
                shutil.copytree(SAMPLE / student, dest / student, symlinks=True)
    for (student, exercise) in MADE:
        if student in students:
            (dest / student).mkdir(exist_ok=True)
            (dest / student / planted.solution(exercise).name).write_text(made(student, exercise))
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/sample_class.py DEST (a folder to write the sample class into)")
    print(copy(Path(sys.argv[1])))
