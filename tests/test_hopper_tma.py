"""TMA and mbarrier on the GPU: a tile loaded by TMA must sit where st's address function says, for
every swizzle mode; a tile written by plain stores must come out of a TMA store (and store-add) intact;
mbarrier phases must flip as documented."""

from __future__ import annotations

from pathlib import Path

import pytest

import tklab
from tklab import tma

KERNELS = Path(__file__).resolve().parent / "kernels"
pytestmark = [pytest.mark.gpu, pytest.mark.hopper]

# probe suffix -> (torch dtype name, tile rows, tile cols, swizzle argument for tklab.run.tma)
PROBES = {
    "bf16_64x128_sw128": ("bfloat16", 64, 128, None),  # None: the default must pick 128B, like st
    "bf16_64x128_sw64": ("bfloat16", 64, 128, 64),
    "bf16_64x128_sw32": ("bfloat16", 64, 128, 32),
    "bf16_64x128_interleave": ("bfloat16", 64, 128, 16),
    "bf16_64x128_none": ("bfloat16", 64, 128, 0),
    "bf16_512x64_sw128": ("bfloat16", 512, 64, 128),
    "f32_64x64_sw128": ("float32", 64, 64, None),
    "f32_32x16_sw64": ("float32", 32, 16, None),
}
GRID = (3, 2)  # tiles along columns, rows: the tensor is 2R x 3C, so coordinates are exercised too


@pytest.fixture(scope="module")
def tma_module():
    return tklab.compile((KERNELS / "hopper_tma.cu").read_text(), arch="sm_90a", name="hopper_tma.cu")


def _tensors(dtype: str, rows: int, cols: int):
    torch = pytest.importorskip("torch")
    t = getattr(torch, dtype)
    # small integers: exact in bf16, and their sums too (for store-add)
    x = torch.randint(-64, 64, (GRID[1] * rows, GRID[0] * cols), device="cuda").to(t)
    y = torch.randint(-64, 64, x.shape, device="cuda").to(t)
    return torch, x, y


def _first_mismatch(out, ref) -> str:
    bad = (out != ref).nonzero()
    if len(bad) == 0:
        return "none"
    r, c = (int(v) for v in bad[0])
    return f"({r}, {c}): got {float(out[r, c])}, expected {float(ref[r, c])}; {len(bad)} wrong"


@pytest.mark.parametrize("probe", list(PROBES))
def test_tma_load_lands_where_st_addresses_it(tma_module, probe):
    dtype, rows, cols, swizzle = PROBES[probe]
    torch, x, _ = _tensors(dtype, rows, cols)
    out = torch.full_like(x, float("nan"))
    m = tma.tensor_map(x, (rows, cols), swizzle=swizzle)
    tma_module[f"load_{probe}"](GRID, (128,), (m, out, x.shape[1]), shared_mem=m.tile_bytes + 1024)
    torch.cuda.synchronize()
    assert torch.equal(out, x), _first_mismatch(out, x)


@pytest.mark.parametrize("probe", list(PROBES))
@pytest.mark.parametrize("op", ["store", "add"])
def test_tma_store_and_store_add(tma_module, probe, op):
    dtype, rows, cols, swizzle = PROBES[probe]
    torch, x, y = _tensors(dtype, rows, cols)
    out = y.clone() if op == "add" else torch.full_like(x, float("nan"))
    m = tma.tensor_map(out, (rows, cols), swizzle=swizzle)
    tma_module[f"{op}_{probe}"](GRID, (128,), (m, x, x.shape[1]), shared_mem=m.tile_bytes + 1024)
    torch.cuda.synchronize()
    ref = x + y if op == "add" else x
    assert torch.equal(out, ref), _first_mismatch(out, ref)


@pytest.fixture(scope="module")
def mbarrier_module():
    return tklab.compile((KERNELS / "hopper_mbarrier.cu").read_text(), arch="sm_90a", name="hopper_mbarrier.cu")


@pytest.fixture(scope="module")
def ring_module():
    return tklab.compile((KERNELS / "hopper_ring.cu").read_text(), arch="sm_90a", name="hopper_ring.cu")


def test_mbarrier_phase_parity(mbarrier_module):
    import cupy as cp

    out = cp.full(8, -1, dtype=cp.int32)
    mbarrier_module["phases"]((1,), (32,), (out,))
    # parity 1 on a fresh barrier: done; phase 0 after 0 / 1 / 2 arrivals; then phase 1 after 2 more
    assert out.get().tolist() == [1, 0, 0, 1, 0, 1, 0, -1]


@pytest.mark.parametrize("laps", [1, 2, 3, 1001])
def test_pipeline_ring_hands_every_value_to_every_consumer_in_order(ring_module, laps):
    import cupy as cp

    out = cp.full(6, -1, dtype=cp.int32)
    ring_module["ring"]((1,), (128,), (out, laps))
    sums, disorder = out.get()[:3].tolist(), out.get()[3:].tolist()
    assert sums == [laps * (laps - 1) // 2] * 3
    assert disorder == [0, 0, 0]
