"""``python -m tklab <verb>``: doctor, exercises, check, hint, grade, grade-merge, leaderboard, nbgrade,
report."""

from __future__ import annotations

import importlib
import sys

VERBS = {
    "doctor": ("tklab.course.doctor", "what works on this machine and what a missing piece costs"),
    "exercises": ("tklab.grading.index",
                  "regenerate exercises/ from solutions/ (--check: verify; --list: the index)"),
    "check": ("tklab.grading.check", "check a learner's file: python -m tklab check exercises/ch02_smem_tiling.cu"),
    "hint": ("tklab.grading.hints", "the next hint of an exercise: python -m tklab hint ch10_flash [--more]"),
    "grade": ("tklab.grading.grade", "grade a class: python -m tklab grade --class DIR [--shard I/N --out F]"),
    "grade-merge": ("tklab.grading.grade_shards",
                    "join the sheets of grade --shard: python -m tklab grade-merge --out F S..."),
    "leaderboard": ("tklab.grading.leaderboard",
                    "the challenges' leaderboard from grade sheets: python -m tklab leaderboard F... [--md M]"),
    "nbgrade": ("tklab.grading.nbgrade", "nbgrader assignments from the exercises, autograded outside the notebook"),
    "report": ("tklab.course.report", "GPU check and benchmarks, report to bench/results/ (make gpu-check)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help") or argv[0] not in VERBS:
        if argv and argv[0] not in ("-h", "--help", "help"):
            print(f"tklab: unknown command {argv[0]!r}\n", file=sys.stderr)
        print("usage: python -m tklab <command> [options]\n")
        for verb, (_, text) in VERBS.items():
            print(f"  {verb:<10} {text}")
        return 0 if not argv or argv[0] in ("-h", "--help", "help") else 2
    if argv[0] == "check":
        from .preflight import advice

        target = next((a for a in argv[1:] if not a.startswith("-")), None)
        if (problem := advice(target)) is not None:
            print(problem, file=sys.stderr)
            return 2
    module = importlib.import_module(VERBS[argv[0]][0])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
