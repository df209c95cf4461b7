"""The chapter-08 Hopper GEMM (solutions/gemm_wgmma.cu) against a float64 reference, on the GPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.gpu, pytest.mark.hopper]


def load_gemm_module():
    """bench/gemm_wgmma.py, imported by path (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("gemm_wgmma", ROOT / "bench" / "gemm_wgmma.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("m,n,k", [(128, 256, 64), (256, 512, 192), (384, 1024, 1024), (1024, 256, 2048),
                                   (2048, 768, 320)])
def test_gemm_matches_float64(m, n, k):
    torch = pytest.importorskip("torch")
    g = load_gemm_module()
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    g.gemm(a, b, c)
    torch.cuda.synchronize()
    assert not torch.isnan(c).any(), "some outputs were never written"
    ref = a.double() @ b.double()
    err = float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))
    assert err < 1e-2, f"relative Frobenius error {err:.2e}"


def test_gemm_runs_on_cupy_arrays_holding_bf16_bits():
    cp = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    g = load_gemm_module()
    a = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    a16, b16 = cp.asarray(a.view(torch.int16)).view(cp.uint16), cp.asarray(b.view(torch.int16)).view(cp.uint16)
    c16 = g.gemm(a16, b16, dtype="bfloat16")
    cp.cuda.runtime.deviceSynchronize()
    c = torch.as_tensor(c16.view(cp.int16), device="cuda").view(torch.bfloat16)
    ref = a.double() @ b.double()
    assert float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref)) < 1e-2
