"""The design exercises of chapters 07-10 (issue 25, item 3): the learner writes something the chapter
explained but never showed, in a copy of the chapter's kernel. What is specific to them is here; the rest runs
through the machinery every exercise shares:

- their planted suites are ``solutions/<id>/planted.toml``, run by tests/test_planted_mistakes.py (at least 6
  mistakes and 2 benign variants in each core, every mistake caught by the emulated run) and its GPU twin;
- no exercise file holds the answer of an exercise of its chapter or a later one (tests/test_spoilers.py);
- the solution passes and the untouched exercise fails (tests/test_check.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tklab import specs

ROOT = Path(__file__).resolve().parent.parent
DESIGN = [i for i in specs.all_ids() if specs.get(i).design]


def test_each_design_exercise_belongs_to_a_chapter_that_explains_it() -> None:
    assert DESIGN and {specs.get(i).chapter for i in DESIGN} <= {"07", "08", "09", "10"}
    for i in DESIGN:  # a chapter prefix names the chapter's own exercise, never its design exercise
        assert specs.find(i[:4]).id != i


# The launch each spec computes (the sandboxed run cannot compile the solution to read it) against what the
# kernel exports, compiled here for sm_90a: (exported name, the launch's shared memory at a small case).
SHARED = {
    "ch07_ring_protocol": ("ring_shared_bytes", lambda sp: sp.launch({"M": 1, "N": 4}).shared_mem),
    "ch08_warp_specialized": ("gemm_shared_bytes", lambda sp: sp.launch({"M": 128, "N": 256, "K": 64}).shared_mem),
    "ch09_local_mask": ("flash_shared_bytes", lambda sp: sp.launch({"B": 1, "H": 1, "N": 1, "W": 1}).shared_mem),
    "ch10_gqa": ("flash_shared_bytes",
                 lambda sp: sp.launch({"B": 1, "H": 1, "HKV": 1, "N": 1, "causal": 0}).shared_mem),
}


def test_every_design_exercise_has_its_launch_checked() -> None:
    assert set(SHARED) == set(DESIGN)


@pytest.mark.parametrize("exercise", sorted(SHARED))
def test_the_launch_asks_for_the_shared_memory_the_kernel_exports(exercise: str) -> None:
    import tklab

    spec = specs.get(exercise)
    name, launched = SHARED[exercise]
    mod = tklab.compile((ROOT / spec.solution).read_text(), arch="sm_90a", name=spec.filename, options=spec.options)
    assert mod.constants[name] == launched(spec)
