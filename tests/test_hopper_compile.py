"""CPU checks of the Hopper library: every probe kernel and the GEMM compile for sm_90a, the SASS holds
the instructions we asked for, sm_80 builds are unaffected, and tklab.run.tma's host-side rules hold."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import tklab
from tklab import gemm, tma

ROOT = Path(__file__).resolve().parent.parent
KERNELS = Path(__file__).resolve().parent / "kernels"


def _compile(name: str, arch: str = "sm_90a") -> tklab.toolchain.compiler.Module:
    return tklab.compile((KERNELS / name).read_text(), arch=arch, name=name)


# ---- the GEMM (every step of chapter 08: tests/test_ch07_ch08_compile.py) ------------------------------
def test_gemm_uses_tma_and_wgmma_without_spills():
    k = gemm.compiled(gemm.get("2_warp_specialised"))
    assert k.histogram.get("HGMMA", 0) == 4  # 64-deep stage = 4 x m64n256k16, one copy of the loop body
    assert k.histogram.get("UTMALDG", 0) > 0
    assert k.spill_bytes == 0 and k.stack_bytes == 0
    assert "64x256x16" in k.sass and "tnspB" in k.sass  # B read MN-major, straight from row-major memory
    assert "C7508" not in k.module.log  # setmaxnreg was honoured (the compiler warns when it ignores it)


def test_gemm_rejects_shapes_that_are_not_multiples_of_the_tile():
    s = gemm.get("2_warp_specialised")
    gemm.check_shapes(s, 256, 512, 128)  # fine: no exception
    with pytest.raises(ValueError, match="M=100 is not a multiple of 128"):
        gemm.gemm(np.zeros((100, 64)), np.zeros((64, 256)), step=s)
    with pytest.raises(ValueError, match="N=200"):
        gemm.check_shapes(s, 128, 200, 64)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        gemm.gemm(np.zeros((128, 64)), np.zeros((128, 256)), step=s)


# ---- probe kernels ----------------------------------------------------------------------------------
def test_wgmma_probes_issue_one_hgmma_per_k16_with_the_right_transposes():
    mod = _compile("hopper_wgmma.cu")
    assert len(mod.kernels) >= 20
    for name in mod.kernels:
        k = mod[name]
        m = re.search(r"_k(\d+)", name)
        depth = int(m.group(1)) if m else (32 if name == "ss_AtB_n64_il" else 64)
        assert k.histogram.get("HGMMA", 0) == depth // 16, name
        assert k.spill_bytes == 0, name
        n = int(re.search(r"_n(\d+)", name).group(1))
        hgmma = [ln for ln in k.sass.splitlines() if "HGMMA" in ln]
        assert all(f"64x{n}x16" in ln for ln in hgmma), name
        b_mn_major = "_AB_" in name or "_AtB_" in name
        assert all(("tnspB" in ln) == b_mn_major for ln in hgmma), name
        a_mn_major = "_At" in name
        assert all(("tnspA" in ln) == a_mn_major for ln in hgmma), name
        if name.startswith("rs_"):
            assert all("gdesc" in ln and re.search(r"HGMMA\S* R\d+, R\d+", ln) for ln in hgmma), name


WGMMA_NAMES = r"""
#include "tk.cuh"
using namespace tk;
extern "C" __global__ void __launch_bounds__(128) names(float* out) {
    __shared__ st_bf<64, 64> a, at, b, bt;
    rt<float, 16, 64> d, e;
    warpgroup::mm_AB(d, a, b);                                      // each name is the one template ...
    warpgroup::mma<warpgroup::major::k, warpgroup::major::mn>(e, a, b, false);  // ... with its majors
    warpgroup::mma_AtBt(d, at, bt, true);                           // every name takes the run-time flag
    warpgroup::mma_async_wait(d, e);
    warpgroup::store(gl<float>(out, 64, 64), d, {0, 0});
    warpgroup::store(gl<float>(out + 64 * 64, 64, 64), e, {0, 0});
}
"""


def test_wgmma_names_are_one_template_and_a_register_a_must_be_k_major():
    k = tklab.compile(WGMMA_NAMES, arch="sm_90a", name="names.cu")["names"]
    hgmma = [ln for ln in k.sass.splitlines() if "HGMMA" in ln]
    assert len(hgmma) == 3 * 4 and sum("tnspA" in ln for ln in hgmma) == 4  # only A^T*B^T transposes A
    bad = WGMMA_NAMES.replace("warpgroup::mma_AtBt(d, at, bt, true);",
                              "rt_bf<16, 64> ra; warpgroup::mma_AtB(d, ra, bt);")
    with pytest.raises(tklab.CompileError, match="K-major"):
        tklab.compile(bad, arch="sm_90a", name="names.cu")


def test_tma_and_mbarrier_probes_compile():
    mod = _compile("hopper_tma.cu")
    for name in mod.kernels:
        op = "UTMALDG" if name.startswith("load_") else ("UTMAREDG" if name.startswith("add_") else "UTMASTG")
        assert mod[name].histogram.get(op, 0) > 0, (name, op)
    assert _compile("hopper_mbarrier.cu")["phases"].histogram.get("SYNCS", 0) > 0
    ring = _compile("hopper_ring.cu")["ring"]
    assert ring.histogram.get("SYNCS", 0) > 0  # mbarrier operations


def test_sm80_builds_ignore_the_hopper_headers():
    src = '#include "tk.cuh"\nextern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n'
    assert tklab.compile(src, arch="sm_80").kernels == ["k"]
    uses = '#include "tk.cuh"\nextern "C" __global__ void k() { tk::fence_proxy_async(); }\n'
    with pytest.raises(tklab.CompileError):
        tklab.compile(uses, arch="sm_80")


def test_python_swizzle_choice_matches_the_device_tile():
    """tklab.run.tma.pick_swizzle and st's default_swizzle must agree, or TMA writes another layout."""
    cases = [(64, "bf16", 2), (32, "bf16", 2), (16, "bf16", 2), (128, "bf16", 2), (48, "bf16", 2),
             (32, "float", 4), (16, "float", 4), (48, "float", 4)]
    asserts = [f"static_assert(tk::st<{t}, 16, {c}>::swz::bytes == {tma.pick_swizzle(c, size)});"
               for c, t, size in cases]
    assert {tma.pick_swizzle(c, size) for c, _, size in cases} == {32, 64, 128}
    src = '#include "tk.cuh"\nusing tk::bf16;\n' + "\n".join(asserts) + '\nextern "C" __global__ void k() {}\n'
    tklab.compile(src, arch="sm_90a")


# ---- tklab.run.tma host-side rules ----------------------------------------------------------------------
def _plan(shape, tile, dtype="bfloat16", swizzle=None, address=0x10000, strides=None, fold=False):
    itemsize = tma.DTYPES[dtype][0] if dtype in tma.DTYPES else 2
    if strides is None:
        strides = tuple(int(s) for s in np.cumprod((1, *shape[:0:-1]))[::-1] * itemsize)
    return tma.plan(address, tuple(shape), strides, dtype, tile, swizzle, fold=fold)


def test_plan_boxes_are_one_panel_of_the_tile():
    p = _plan((1024, 512), (64, 256))  # 512-byte rows: 128B swizzle, panels of 64 columns
    assert (p.swizzle, p.box, p.copies_per_tile, p.tile_bytes) == (128, (64, 64), 4, 64 * 256 * 2)
    assert p.dims == (512, 1024) and p.row_stride == 1024
    assert _plan((1024, 512), (64, 16)).swizzle == 32
    assert _plan((1024, 512), (64, 16)).box == (16, 64)
    assert _plan((1024, 512), (512, 64)).box == (64, 256)  # boxes are at most 256 rows
    assert _plan((1024, 512), (64, 64), swizzle=0).box == (64, 64)  # plain row-major: the whole row
    assert _plan((1024, 512), (64, 64), swizzle=16).box == (8, 64)  # interleaved: 16-byte panels
    assert _plan((64, 512), (64, 64), dtype="float32").box == (32, 64)


def test_plan_keeps_leading_dimensions_so_tiles_stay_inside_one_matrix():
    p = _plan((2, 4, 128, 64), (64, 64))  # [batch, heads, seq, d]
    assert p.rank == 4 and p.dims == (64, 128, 4, 2)
    assert p.strides == (128, 128 * 128, 4 * 128 * 128) and p.box == (64, 64, 1, 1)


def test_plan_takes_any_strides_of_the_leading_dimensions():
    """[batch, seq, heads, d] memory seen as [batch, heads, seq, d] (a transposed view): no copy needed."""
    b, n, h, d = 2, 100, 4, 64
    strides = (n * h * d * 2, d * 2, h * d * 2, 2)  # bytes, for the (b, h, n, d) view
    p = _plan((b, h, n, d), (64, 64), strides=strides)
    assert p.dims == (d, n, h, b) and p.strides == (h * d * 2, d * 2, n * h * d * 2)


def test_plan_folds_leading_dimensions_into_rows_when_asked():
    p = _plan((2, 4, 128, 64), (64, 64), fold=True)
    assert p.dims == (64, 2 * 4 * 128) and p.rank == 2
    with pytest.raises(tma.TmaError, match="cannot be folded"):
        _plan((2, 4, 128, 64), (64, 64), fold=True, strides=(4 * 256 * 128, 256 * 128, 128, 2))


@pytest.mark.parametrize("kwargs,message", [
    ({"address": 0x10008}, "16-byte aligned"),
    ({"shape": (64, 100)}, "multiple of 16 bytes"),
    ({"dtype": "float64"}, "support"),
    ({"tile": (64, 64), "swizzle": 48}, "swizzle must be"),
    ({"tile": (64, 16), "swizzle": 128}, "whole number"),
    ({"tile": (64, 512), "swizzle": 0}, "256-element box"),
    ({"tile": (384, 64)}, "multiple of 256"),
    ({"strides": (2, 2 * 64)}, "contiguous"),
    ({"shape": (2, 2, 2, 2, 64, 64)}, "at most 5"),
])
def test_plan_rejects_what_tma_cannot_do(kwargs, message):
    args = {"shape": (256, 64), "tile": (64, 64)} | kwargs
    with pytest.raises(tma.TmaError, match=message):
        _plan(**args)


def test_tensor_map_rejects_host_arrays():
    with pytest.raises(tma.TmaError, match="CuPy array or a torch CUDA tensor"):
        tma.tensor_map(np.zeros((64, 64), np.float32), (64, 64))


def test_tma_refuses_tiles_it_cannot_address():
    """TMA needs 128-byte-aligned shared memory: a 16-byte-aligned layout policy must not compile,
    while the library's own unswizzled tile (128-byte aligned) does."""
    body = ('extern "C" __global__ void k(const __grid_constant__ CUtensorMap m) {{\n'
            '  __shared__ st<bf16, 16, 16, {policy}> t; __shared__ mbarrier b;\n'
            '  tma::load_async(t, m, b, {{0, 0}});\n}}\n')
    head = ('#include "tk.cuh"\nusing namespace tk;\n'
            'struct row_major_16 { static constexpr int bytes = 0; static constexpr int alignment = 16;\n'
            '  __host__ __device__ static constexpr uint32_t apply(uint32_t b) { return b; } };\n')
    with pytest.raises(tklab.CompileError, match="128-byte-aligned"):
        tklab.compile(head + body.format(policy="row_major_16"), arch="sm_90a")
    assert tklab.compile(head + body.format(policy="swizzle_none"), arch="sm_90a").histogram["UTMALDG"] >= 1
