"""wgmma on the GPU against a float64 reference: every width N the library is used with, each operand
arrangement (A B, A Bᵀ, Aᵀ B, Aᵀ Bᵀ), A from shared memory or registers, every shared layout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tklab

KERNELS = Path(__file__).resolve().parent / "kernels"
pytestmark = [pytest.mark.gpu, pytest.mark.hopper]


@pytest.fixture(scope="module")
def wgmma_module():
    return tklab.compile((KERNELS / "hopper_wgmma.cu").read_text(), arch="sm_90a", name="hopper_wgmma.cu")


def _probe_names() -> list[str]:
    src = (KERNELS / "hopper_wgmma.cu").read_text()
    return re.findall(r"^(?:SS|RS)\((\w+),", src, re.M)


def _params(name: str, src: str) -> tuple[str, int, int, str]:
    """(arrangement, N, K, element type) from the probe's macro line."""
    m = re.search(rf"^(?:SS|RS)\({name}, (\w+), (\w+), (\d+), (\d+)", src, re.M)
    return m.group(1), int(m.group(3)), int(m.group(4)), m.group(2)


@pytest.mark.parametrize("name", _probe_names())
def test_wgmma_matches_float64(wgmma_module, name):
    torch = pytest.importorskip("torch")
    op, n, k, ty = _params(name, (KERNELS / "hopper_wgmma.cu").read_text())
    dt = torch.bfloat16 if ty == "bf16" else torch.float16
    a_math = torch.randn(64, k, device="cuda").to(dt)   # fresh inputs each run
    b_math = torch.randn(k, n, device="cuda").to(dt)
    a = a_math.t().contiguous() if op in ("AtB", "AtBt") else a_math
    b = b_math.t().contiguous() if op in ("ABt", "AtBt") else b_math
    d = torch.full((64, n), float("nan"), device="cuda", dtype=torch.float32)
    smem = (a.numel() + b.numel()) * 2 + 2048
    wgmma_module[name]((1,), (128,), (a, b, d), shared_mem=smem)
    torch.cuda.synchronize()
    ref = a_math.double() @ b_math.double()
    if name.startswith("rs_"):
        ref = ref + 1.0  # the RS probes accumulate onto a tile of ones
    err = float(torch.linalg.norm(d.double() - ref) / torch.linalg.norm(ref))
    assert not torch.isnan(d).any(), f"{name}: unwritten outputs"
    assert err < 1e-5, (f"{name}: relative error {err:.2e}; row 0 starts {d[0, :4].tolist()}, "
                        f"expected {ref[0, :4].tolist()}")
