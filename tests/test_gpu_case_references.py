"""Every GPU case's float64 reference fits the checking process: a GPU check computes each case's expected output on
the CPU, in the parent, before it can judge. A case as large as a benchmark (32 heads of 8192 x 8192 scores) needs
tens of GB there; on the H200 several such checks at once were killed by the kernel's OOM killer and left no report
at all (the challenges' suites on the H200). The benchmark's shape is checked on the GPU against the library instead
(``Bench.expect``). Each exercise's references run here in a child process under an address-space cap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tklab.grading import specs

ROOT = Path(__file__).resolve().parent.parent

#: What one case's reference may use (address space of the whole child, numpy and the spec module included).
CAP_BYTES = 6 << 30

_CHILD = r"""
import resource, sys, time
import numpy as np
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
from tklab.grading import specs
spec = specs.get(sys.argv[1])
for i, dims in enumerate(spec.cases):
    dims = {{k: v for k, v in dims.items() if k != "tma_order"}}
    t0 = time.perf_counter()
    spec.reference(spec.inputs(np.random.default_rng(1), dims), dims)
    print(i, dims, f"{{time.perf_counter() - t0:.1f}} s", flush=True)
"""


def _gpu_exercises() -> list[str]:
    return [i for i in specs.all_ids() if getattr(specs.get(i), "cases", None)]


# make test-full (its part beyond make test): about half a minute of references on 2 cores, and what it guards (a GPU
# check's parent) cannot break on the CPU path every commit exercises
@pytest.mark.test_full
@pytest.mark.parametrize("exercise_id", _gpu_exercises())
def test_every_gpu_case_reference_fits_in_memory(exercise_id: str) -> None:
    out = subprocess.run([sys.executable, "-c", _CHILD.format(cap=CAP_BYTES), exercise_id], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (
        f"{exercise_id}: a GPU case's float64 reference did not complete under {CAP_BYTES >> 30} GiB "
        f"(cases done before it: {out.stdout.strip() or 'none'}):\n{out.stderr[-1500:]}")


def test_the_cap_catches_a_benchmark_sized_case() -> None:
    """The test above can fail: the sliding-window challenge's benchmark shape as a case exceeds the cap."""
    code = _CHILD.format(cap=CAP_BYTES).replace("enumerate(spec.cases)", "enumerate([spec.bench.dims])")
    out = subprocess.run([sys.executable, "-c", code, "ch10_challenge_swa"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode != 0 and "MemoryError" in out.stderr, out.stdout + out.stderr[-800:]
