"""The trace's shared-memory counts against Nsight Compute's, recorded on the H200 (bench/results/), and live.

Compared (``tklab.trace.ncu``): instructions exactly (the trace's launch is smaller: times ``scale``),
wavefronts per instruction to the whole wavefront, ncu's reading at most 20 % above the trace's and never
below. Kernels: chapter 04's naive, padded and swizzled transposes, chapter 05's mma.sync + ldmatrix GEMM.
Not compared: kernels whose shared loads nvcc merges into wider ones (chapter 02/03's matmuls: the emulator
executes the source's accesses as the host compiler emits them; measured for chapter 02's solution at 64^3: the
trace counts 16384 shared load instructions, the 4096^3 profile scaled down 10240, while the 512 stores agree)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import tklab
from tklab.trace import ncu
from tklab.trace.model import Trace

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT / "bench"))

try:
    from tklab.emulate.toolchain import find

    find()
    HAVE_CC = True
except Exception:  # noqa: BLE001 - no C++ compiler: the emulator cannot run
    HAVE_CC = False
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C++ compiler for the emulator")


def _strings(notebook: str) -> dict[str, str]:
    from profile_samples import _notebook_strings  # bench/profile_samples.py: what the profiles compiled

    return _notebook_strings(notebook)


def _transpose(src: str, kernel: str, n: int) -> Trace:
    x = np.arange(n * n, dtype=np.float32).reshape(n, n)
    out = np.zeros_like(x)
    tr = tklab.trace(src, kernel=kernel, grid=(n // 32, n // 32), block=(32, 8), args=(x, out, n, n),
                     name="transpose.cu")
    assert np.array_equal(out, x.T)
    return tr


def _profiles() -> dict:
    return json.loads((RESULTS / "profiles.json").read_text())


def _chapters() -> dict:
    return json.loads((RESULTS / "ncu_chapters_h200.json").read_text())["kernels"]


@pytest.fixture(scope="module")
def notebook_transposes() -> dict[str, Trace]:
    src = _strings("04_banks_swizzling.ipynb")["TRANSPOSE"]
    return {k: _transpose(src, k, 64) for k in ("transpose_naive", "transpose_padded")}


@needs_cc
def test_naive_and_padded_transposes_match_ncu(notebook_transposes: dict[str, Trace]) -> None:
    naive, padded = notebook_transposes["transpose_naive"], notebook_transposes["transpose_padded"]
    assert ncu.predicted(naive)[ncu.WAVES["ld"]] == 32 * 128  # 128 column reads of 32 wavefronts (64x64)
    profiles, chapters = _profiles(), _chapters()
    assert ncu.compare(naive, profiles["ch04.transpose_naive"]["metrics"], (8192 / 64) ** 2) == []
    assert ncu.compare(naive, chapters["ch04.transpose:transpose_naive"]["metrics"], (4096 / 64) ** 2) == []
    assert ncu.compare(padded, chapters["ch04.transpose:transpose_padded"]["metrics"], (4096 / 64) ** 2) == []
    # The rule fails where it should: naive's counts against padded's recording, or a wrong scale.
    assert ncu.compare(naive, chapters["ch04.transpose:transpose_padded"]["metrics"], (4096 / 64) ** 2)
    assert ncu.compare(padded, chapters["ch04.transpose:transpose_padded"]["metrics"], (8192 / 64) ** 2)


@needs_cc
def test_the_rule_fails_what_it_should(notebook_transposes: dict[str, Trace]) -> None:
    """The trace's own counts pass; twice the sectors, fewer wavefronts than the trace, or 25 % more fail."""
    tr = notebook_transposes["transpose_naive"]
    same = {k: 4 * v for k, v in ncu.predicted(tr).items()}
    assert ncu.compare(tr, same, 4) == []
    for name, factor in ((ncu.SECTORS["ld"], 2.0), (ncu.WAVES["ld"], 0.97), (ncu.WAVES["st"], 1.25)):
        assert ncu.compare(tr, {**same, name: same[name] * factor}, 4), name


@needs_cc
def test_swizzled_transpose_matches_ncu() -> None:
    src = (ROOT / "solutions" / "ch04_swizzle" / "ch04_swizzle.cu").read_text()
    tr = _transpose(src, "transpose", 64)
    assert ncu.compare(tr, _profiles()["ch04.transpose_swizzled"]["metrics"], (8192 / 64) ** 2) == []


@needs_cc
def test_mma_gemm_ldmatrix_and_stores_match_ncu() -> None:
    """Chapter 05's GEMM (128x128 blocks) at 128^3 against its 4096^3 profile: 32^3 times fewer of everything."""
    s = _strings("05_tensor_cores_mma.ipynb")
    n = 128
    rng = np.random.default_rng(0)
    a, b = (rng.integers(0, 1 << 14, size=(n, n)).astype(np.uint16) for _ in range(2))
    c = np.zeros((n, n), np.uint16)
    tr = tklab.trace(s["PTX"] + s["GEMM"], kernel="gemm_mma", grid=(1, 1), block=(128,), args=(a, b, c, n, n, n),
                     name="gemm_mma.cu")
    assert ncu.compare(tr, _profiles()["ch05.mma_gemm"]["metrics"], (4096 / n) ** 3) == []


@pytest.mark.gpu
@needs_cc
def test_live_ncu_equals_the_trace(notebook_transposes: dict[str, Trace]) -> None:
    """On a GPU with ncu: profile the notebook's transposes at 1024^2 and compare with the 64^2 traces (shared
    instructions and wavefronts, global requests and sectors)."""
    from tklab.run import gpu

    if not gpu.available():
        pytest.skip("no GPU")
    import cupy as cp

    src = _strings("04_banks_swizzling.ipynb")["TRANSPOSE"]
    mod = tklab.compile(src, arch=gpu.arch(), name="transpose.cu")
    n = 1024
    x = cp.random.default_rng(1).standard_normal((n, n), dtype=cp.float32)
    out = cp.empty_like(x)
    from tklab.profile import ProfileUnavailable

    for name, tr in notebook_transposes.items():
        try:
            r = tklab.profile(mod[name].prepare((n // 32, n // 32), (32, 8), (x, out, n, n)),
                              metrics=[*ncu.INSTR.values(), *ncu.WAVES.values(), *ncu.REQUESTS.values(),
                                       *ncu.SECTORS.values()])
        except ProfileUnavailable as e:
            pytest.skip(f"ncu unavailable: {e}")
        if not hasattr(r, "metrics"):
            pytest.skip(f"ncu unavailable: {r}")
        assert ncu.compare(tr, r.metrics, (n / 64) ** 2) == [], name
