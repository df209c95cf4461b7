"""The GPU twin of tests/test_planted_mistakes.py: on the GPU (with the emulator's hazard analysis beside
it, as ``tklab.check`` does there), every planted mistake FAILS with each of three seeds and every benign
variant PASSES. Mistakes marked ``speed`` (chapter 10's missing overlap) are checked with timing on.
Run by ``make gpu-check`` / bench/grading_gpu_check.sh on an H200."""

from __future__ import annotations

from pathlib import Path

import planted
import pytest

SEEDS = (1, 2, 3)
ALL = [m for e in planted.exercises() for m in planted.load(e)]


@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("mutation", ALL, ids=lambda m: m.id)
def test_planted_mistake_fails_on_the_gpu_with_three_seeds(mutation: planted.Mutation, tmp_path: Path) -> None:
    path = planted.mutated_file(mutation, tmp_path)
    seeds = SEEDS[:1] if mutation.benign else SEEDS
    verdicts = planted.run_all([(path, mutation.exercise, s) for s in seeds], bench=mutation.speed, workers=1)
    for seed, v in zip(seeds, verdicts):
        assert v.established == "gpu", (seed, v.summary)
        if mutation.benign:
            assert v.passed, f"{mutation.id} must pass (seed {seed}): {v.verdict}: {v.summary}"
        else:
            assert v.failed, f"{mutation.id} must fail (seed {seed}): {v.verdict}: {v.summary}"
