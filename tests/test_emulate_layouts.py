"""Every emulated tensor-core / matrix / TMA instruction against what the H200 did.

The probe kernels of ``bench/probes/layouts_probe.py`` (inline PTX, exactly as they ran on the GPU) are
compiled for the CPU emulator and fed the recorded inputs of ``bench/results/layouts_h200.json``; the
outputs must equal the recorded hardware outputs bit for bit. The same file proves ``tklab.models.layouts``
(tests/test_layouts.py), so the emulator and the layout pictures agree with the hardware and each other.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from scripts import load_script

from tklab import layouts

ROOT = Path(__file__).resolve().parent.parent
TABLE = json.loads((ROOT / "bench" / "results" / "layouts_h200.json").read_text())

emu = pytest.importorskip("tklab.emulate")


sys.path.insert(0, str(ROOT / "bench" / "probes"))  # the probe imports common.py beside it
probe = load_script(ROOT / "bench" / "probes" / "layouts_probe.py", "layouts_probe")


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_mma_m16n8k16_matches_the_h200(dt: str) -> None:
    mod = emu.compile(probe.mma_source(), arch="sm_90a", name="probe_mma.cu")
    exps = TABLE["mma"][dt]
    a = np.array([e["a"] for e in exps], dtype=np.uint32)
    b = np.array([e["b"] for e in exps], dtype=np.uint32)
    c = np.array([e["c"] for e in exps], dtype=np.float32)
    d = np.full((len(exps), 32, 4), np.nan, dtype=np.float32)
    mod[f"probe_mma_{dt}"]((len(exps),), (32,), (a, b, c, d))
    assert d.tolist() == [e["d"] for e in exps]


def test_ldmatrix_every_form_matches_the_h200() -> None:
    mod = emu.compile(probe.matrix_source(), arch="sm_90a", name="probe_matrix.cu")
    seen = set()
    for e in TABLE["ldmatrix"]:
        out = np.zeros((32, 4), dtype=np.uint32)
        name = f"probe_ldmatrix_x{e['num']}{'_trans' if e['trans'] else ''}"
        mod[name]((1,), (32,), (np.array(e["rows"], np.int32), out))
        assert out.tolist() == e["out"], name
        seen.add((e["num"], e["trans"]))
    assert seen == {(n, t) for n in (1, 2, 4) for t in (False, True)}


def test_stmatrix_matches_the_h200() -> None:
    mod = emu.compile(probe.matrix_source(), arch="sm_90a", name="probe_matrix.cu")
    for e in TABLE["stmatrix"]:
        dump = np.zeros(2048, dtype=np.uint16)
        mod[f"probe_stmatrix_x{e['num']}"]((1,), (32,), (np.array(e["rows"], np.int32),
                                                         np.array(e["regs"], np.uint32), dump))
        assert dump.tolist() == e["smem"], e["num"]


def test_movmatrix_transposes_like_the_layout_model() -> None:
    """movmatrix.trans: lane 4g+t must end up with (2t, g) and (2t+1, g) of the 8x8 matrix (the ldmatrix.x1
    fragment read transposed, as tklab.models.layouts models it)."""
    src = r"""
extern "C" __global__ void mv(const unsigned* in, unsigned* out) {
  unsigned d;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(in[threadIdx.x]));
  out[threadIdx.x] = d;
}"""
    mod = emu.compile(src, arch="sm_80", name="movmatrix.cu")
    frag = layouts.fragment("ldmatrix.x1")
    mat = np.arange(64, dtype=np.uint32).reshape(8, 8) + 100
    regs = np.zeros(32, np.uint32)
    for lane in range(32):
        for i in range(2):
            _, r, c = frag.coords(lane, i)
            regs[lane] |= mat[r, c] << (16 * i)
    out = np.zeros(32, np.uint32)
    mod["mv"]((1,), (32,), (regs, out))
    trans = layouts.fragment("ldmatrix.x1.trans")
    for lane in range(32):
        for i in range(2):
            _, r, c = trans.coords(lane, i)
            assert (int(out[lane]) >> (16 * i)) & 0xFFFF == mat[r, c]


def test_wgmma_every_n_matches_the_h200() -> None:
    exps = TABLE["wgmma"]
    ns = sorted({e["n"] for e in exps})
    mod = emu.compile(probe.wgmma_source(ns), arch="sm_90a", name="probe_wgmma.cu")
    for e in exps:
        n = e["n"]
        img = np.frombuffer(bytes.fromhex(e["b_image"]), dtype=np.uint8).copy()
        fields = ((e["lbo"] >> 4) << 16) | ((e["sbo"] >> 4) << 32)
        d = np.full((128, n // 2), np.nan, dtype=np.float32)
        mod[f"probe_wgmma_n{n}"]((1,), (128,), (np.array(e["a"], np.uint32), img, np.int32(len(img) // 16),
                                                 np.uint64(fields), d), shared_mem=len(img))
        assert d.tolist() == e["d"], (n, e["kind"])
    assert ns == list(range(8, 257, 8))


def test_tma_2d_every_swizzle_and_the_edge_match_the_h200() -> None:
    # The GPU probe reads its map through a pointer to a copy the driver encoded; here the map travels by value (a
    # tensor map over a host array the emulator maps itself: an interpreted kernel reaches no other memory).
    source = probe.tma_source()
    by_value = source.replace("const unsigned long long* tmap,", "const __grid_constant__ CUtensorMap tmap_value,")
    by_value = by_value.replace('"l"(tmap)', '"l"(&tmap_value)')
    assert by_value.count("tmap_value") == 2
    mod = emu.compile('#include "tk/hopper/tensor_map.cuh"\n' + by_value, arch="sm_90a", name="probe_tma.cu")
    rows, cols = TABLE["tma"][0]["global_rows"], TABLE["tma"][0]["global_cols"]
    src = ((np.arange(rows * cols, dtype=np.uint32) + 1) & 0xFFFF).astype(np.uint16).reshape(rows, cols)
    modes = set()
    for c in TABLE["tma"]:
        span = {"none": 0, "32B": 32, "64B": 64, "128B": 128}[c["swizzle"]]
        tmap = emu.TensorMap(src, (c["box_cols"], c["box_rows"]), swizzle=span)
        nbytes = c["box_rows"] * c["box_cols"] * 2
        dump = max(2 * nbytes, 2048)
        out = np.zeros(dump // 2, dtype=np.uint16)
        status = np.zeros(1, dtype=np.int32)
        mod["probe_tma"]((1,), (128,), (tmap, np.int32(c["x0"]), np.int32(c["y0"]), np.int32(nbytes),
                                        np.int32(dump), out, status), shared_mem=dump + 1024 + 16)
        assert status[0] == c["status"] == 1
        assert out.tolist() == c["smem"], c
        modes.add(c["swizzle"])
    assert modes == {"none", "32B", "64B", "128B"}


# ---- wgmma with the library's shared layouts (every swizzle, both majors, SS and RS) -------------------------
WGMMA_SRC = ROOT / "tests" / "kernels" / "hopper_wgmma.cu"


def _wgmma_probes() -> list[tuple[str, str, str, int, int]]:
    import re

    return [(m.group(2), m.group(1), m.group(3), int(m.group(5)), int(m.group(6))) for m in
            re.finditer(r"^(SS|RS)\((\w+), (\w+), (\w+), (\d+), (\d+)", WGMMA_SRC.read_text(), re.M)]


@pytest.fixture(scope="module")
def wgmma_probes():
    return emu.compile(WGMMA_SRC.read_text(), arch="sm_90a", name="hopper_wgmma.cu")


@pytest.mark.parametrize("name,kind,op,n,k", _wgmma_probes())
def test_wgmma_every_arrangement_and_swizzle_of_the_library(wgmma_probes, name, kind, op, n, k) -> None:
    """The probes of tests/test_hopper_wgmma.py (A·B, A·Bᵀ, Aᵀ·B, Aᵀ·Bᵀ; 128B/64B/32B swizzles and the
    interleaved layout; A from shared memory or registers), against float64, as on the GPU."""
    from tklab.run.arrays import bf16_to_float32, to_bf16_bits

    rng = np.random.default_rng(hash(name) % 2**32)
    f16 = name.endswith("_f16")
    a_math = rng.standard_normal((64, k)).astype(np.float32)
    b_math = rng.standard_normal((k, n)).astype(np.float32)
    if f16:
        bits = lambda x: x.astype(np.float16).view(np.uint16)  # noqa: E731
        value = lambda u: u.view(np.float16).astype(np.float64)  # noqa: E731
    else:
        bits = to_bf16_bits  # noqa: E731
        value = lambda u: bf16_to_float32(u).astype(np.float64)  # noqa: E731
    a_bits, b_bits = bits(a_math), bits(b_math)
    a = np.ascontiguousarray(a_bits.T) if op in ("AtB", "AtBt") else a_bits
    b = np.ascontiguousarray(b_bits.T) if op in ("ABt", "AtBt") else b_bits
    d = np.full((64, n), np.nan, np.float32)
    wgmma_probes[name]((1,), (128,), (a, b, d), shared_mem=(a.size + b.size) * 2 + 2048)
    ref = value(a_bits) @ value(b_bits) + (1.0 if kind == "RS" else 0.0)  # RS probes accumulate onto ones
    err = np.linalg.norm(d.astype(np.float64) - ref) / np.linalg.norm(ref)
    assert not np.isnan(d).any() and err < 1e-6, (name, err)


# ---- TMA loads/stores with the library's tiles, and mbarrier phases (tests/test_hopper_tma.py's probes) ------
TMA_PROBES = {  # suffix -> (dtype, tile rows, cols, swizzle for tensor_map), as in tests/test_hopper_tma.py
    "bf16_64x128_sw128": ("bfloat16", 64, 128, None), "bf16_64x128_sw64": ("bfloat16", 64, 128, 64),
    "bf16_64x128_sw32": ("bfloat16", 64, 128, 32), "bf16_64x128_interleave": ("bfloat16", 64, 128, 16),
    "bf16_64x128_none": ("bfloat16", 64, 128, 0), "bf16_512x64_sw128": ("bfloat16", 512, 64, 128),
    "f32_64x64_sw128": ("float32", 64, 64, None), "f32_32x16_sw64": ("float32", 32, 16, None),
}


@pytest.fixture(scope="module")
def tma_probes():
    return emu.compile((ROOT / "tests" / "kernels" / "hopper_tma.cu").read_text(), name="hopper_tma.cu")


def _tma_tensors(dtype: str, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    from tklab.run.arrays import to_bf16_bits

    rng = np.random.default_rng(rows * cols)
    x, y = (rng.integers(-64, 64, (2 * rows, 3 * cols)).astype(np.float32) for _ in range(2))
    return (to_bf16_bits(x), to_bf16_bits(y)) if dtype == "bfloat16" else (x, y)


@pytest.mark.parametrize("probe", list(TMA_PROBES))
@pytest.mark.parametrize("op", ["load", "store", "add"])
def test_tma_tiles_of_every_swizzle_load_store_and_add(tma_probes, probe: str, op: str) -> None:
    dtype, rows, cols, swizzle = TMA_PROBES[probe]
    x, y = _tma_tensors(dtype, rows, cols)
    kw = {"swizzle": swizzle, "dtype": dtype}
    if op == "load":
        out = np.zeros_like(x)
        m = emu.tensor_map(x, (rows, cols), **kw)
        tma_probes[f"load_{probe}"]((3, 2), (128,), (m, out, x.shape[1]), shared_mem=m.tile_bytes + 1024)
        want = x
    else:
        out = y.copy() if op == "add" else np.zeros_like(x)
        m = emu.tensor_map(out, (rows, cols), **kw)
        tma_probes[f"{op}_{probe}"]((3, 2), (128,), (m, x, x.shape[1]), shared_mem=m.tile_bytes + 1024)
        if op == "add" and dtype == "bfloat16":
            want = tklab_bf16_sum(x, y)
        else:
            want = x + y if op == "add" else x
    assert np.array_equal(out, want), probe


def tklab_bf16_sum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    from tklab.run.arrays import bf16_to_float32, to_bf16_bits

    return to_bf16_bits(bf16_to_float32(x) + bf16_to_float32(y))


def test_mbarrier_phases_and_the_pipeline_ring() -> None:
    mod = emu.compile((ROOT / "tests" / "kernels" / "hopper_mbarrier.cu").read_text(), name="hopper_mbarrier.cu")
    ring_mod = emu.compile((ROOT / "tests" / "kernels" / "hopper_ring.cu").read_text(), name="hopper_ring.cu")
    out = np.full(8, -1, np.int32)
    mod["phases"]((1,), (32,), (out,))
    assert out.tolist() == [1, 0, 0, 1, 0, 1, 0, -1]  # as tests/test_hopper_tma.py expects of the GPU
    for laps in (1, 2, 3, 101):
        ring = np.full(6, -1, np.int32)
        ring_mod["ring"]((1,), (128,), (ring, laps))
        assert ring[:3].tolist() == [laps * (laps - 1) // 2] * 3 and ring[3:].tolist() == [0, 0, 0]
