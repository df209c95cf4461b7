"""The runner's GPU path (fresh inputs, NaN poison, compare, benchmark sanity check, speed ratio) driven
in-process with a stand-in device: CuPy → numpy, the kernel → a numpy function, timings → fixed numbers.
CI has no GPU, so this is where that plumbing is exercised on every commit; the real thing is in the
``gpu``-marked tests of test_check.py."""

from __future__ import annotations

import importlib
import sys
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import tklab
from tklab import gpu, runner, specs
from tklab.bench import BenchResult

ROOT = Path(__file__).resolve().parent.parent


class _Kernel:
    def __init__(self, body):
        self.body, self.launches = body, []

    def __call__(self, grid, block, args, shared_mem=0):
        self.launches.append((grid, block))
        self.body(*args)


@pytest.fixture
def fake_device(monkeypatch):
    fake_cp = types.ModuleType("cupy")
    for name in ("asarray", "full", "all", "abs", "matmul", "float64", "float32", "float16", "uint32", "empty_like"):
        setattr(fake_cp, name, getattr(np, name))
    fake_cp.asnumpy = np.asarray
    monkeypatch.setitem(sys.modules, "cupy", fake_cp)
    monkeypatch.setattr(gpu, "arch", lambda: "sm_90a")
    monkeypatch.setattr(gpu, "name", lambda: "Fake GPU")
    monkeypatch.setattr(gpu, "synchronize", lambda: None)
    times = iter([2.0, 0.5])  # the learner's kernel first, then the library

    def fake_bench(fn, *, flops=None, bytes=None, **kw):  # noqa: A002
        fn()
        ms = next(times)
        return BenchResult(name="fake", ms=ms, ms_min=ms, ms_max=ms, ms_q1=ms, ms_q3=ms, reps=1, flops=flops,
                           bytes=bytes)

    monkeypatch.setattr(importlib.import_module("tklab.bench"), "bench", fake_bench)
    state = {}

    def fake_compile(source, **kw):
        return {spec_kernel: state["kernel"] for spec_kernel in ("smem_matmul",)}

    monkeypatch.setattr(tklab, "compile", fake_compile)
    return state


BENCH = {"M": 256, "N": 512, "K": 128}  # small: numpy stands in for the GPU


def _run(state, body, bench=True):
    spec = specs.get("ch02_smem_tiling")
    spec = replace(spec, bench=replace(spec.bench, dims=BENCH))
    state["kernel"] = _Kernel(body)
    result = {"cases": [], "ok": False, "error": None, "speed": None}
    runner._run_cuda(spec, ROOT / spec.solution, 1234, bench, result)
    return spec, state["kernel"], result


def test_correct_kernel_passes_every_case_and_gets_a_ratio(fake_device):
    def body(a, b, c, m, n, k):
        c[...] = a @ b

    spec, kernel, result = _run(fake_device, body)
    assert result["ok"] and [c["dims"] for c in result["cases"]] == list(spec.cases)
    assert len(kernel.launches) == len(spec.cases) + 2  # every case, the benchmark check, one timing call
    assert kernel.launches[0] == ((768 // 32, 1024 // 32), (32, 32))  # the spec's launch shape
    s = result["speed"]
    assert s["ratio"] == 0.25 and s["ms"] == 2.0 and s["baseline_ms"] == 0.5 and s["target"] == spec.bench.target
    assert s["tflops"] == pytest.approx(2 * 256 * 512 * 128 / 2e-3 / 1e12) and s["dims"] == BENCH


def test_unwritten_edge_is_caught_with_the_first_wrong_element(fake_device):
    def body(a, b, c, m, n, k):  # forgets the last column when N is not a multiple of 32
        full = (int(n) // 32) * 32
        c[:, :full] = (a @ b)[:, :full]

    _, _, result = _run(fake_device, body)
    assert not result["ok"] and result["speed"] is None
    bad = result["cases"][-1]
    assert bad["dims"] == {"M": 33, "N": 65, "K": 47}
    m = bad["outputs"][0]
    assert m["index"] == [0, 64] and m["unwritten"] == 33 and np.isnan(m["got"])


def test_speed_is_not_reported_for_a_kernel_wrong_at_the_benchmark_size(fake_device):
    def body(a, b, c, m, n, k):
        c[...] = a @ b
        if int(m) == BENCH["M"]:
            c[0, 0] += 1.0

    _, _, result = _run(fake_device, body)
    assert result["ok"] and "wrong at the benchmark size" in result["speed"]["error"]


def test_runner_error_description_points_at_cuda_faults():
    e = gpu.CudaError("kernel execution (cuCtxSynchronize) failed: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal "
                      "memory access was encountered")
    d = runner._describe(e, ROOT / "x.cu")
    assert d["kind"] == "cuda" and "outside its arrays" in d["hint"]
