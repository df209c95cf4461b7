"""The tile library compiles for sm_80 and sm_90a, and turns into the instructions it promises.

No GPU needed: NVRTC compiles, cuobjdump disassembles. Each test kernel of tests/kernels/tile_ops.cu
and the chapter-06 GEMM must build for both targets; the SASS must show tensor-core HMMA for the mma
ops, LDSM for ldmatrix loads, LDGSTS for cp.async copies, MOVM for 16-bit layout swaps, and no kernel
may touch local memory (a register tile indexed at run time would).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tklab

ROOT = Path(__file__).resolve().parent.parent
OPS_SRC = ROOT / "tests" / "kernels" / "tile_ops.cu"
GEMM_SRC = ROOT / "solutions" / "gemm_mma_tiles.cu"
ARCHS = ("sm_80", "sm_90a")

_MACROS = "G2R|S2R|SWZ|MAP|BCAST|REDUCE|MMA|LAYOUT"


def declared_kernels(source: str) -> list[str]:
    """Kernel names the source declares, directly or through its one-line instantiation macros."""
    direct = re.findall(r'extern "C" __global__ void (\w+)\(', source)
    via_macro = re.findall(rf"^(?:{_MACROS})\((\w+),", source, flags=re.M)
    return [n for n in direct if n != "name"] + via_macro


@pytest.fixture(scope="module", params=ARCHS)
def ops(request: pytest.FixtureRequest) -> tklab.toolchain.compiler.Module:
    return tklab.compile(OPS_SRC.read_text(), arch=request.param)


@pytest.fixture(scope="module", params=ARCHS)
def gemm(request: pytest.FixtureRequest) -> tklab.toolchain.compiler.Module:
    return tklab.compile(GEMM_SRC.read_text(), arch=request.param)


def test_every_test_kernel_compiles(ops: tklab.toolchain.compiler.Module) -> None:
    names = declared_kernels(OPS_SRC.read_text())
    assert len(names) >= 50, names
    missing = set(names) - set(ops.kernels)
    assert not missing, f"declared but not in the {ops.arch} module: {sorted(missing)}"


def test_no_kernel_uses_local_memory(ops: tklab.toolchain.compiler.Module) -> None:
    bad = {k: (ops[k].spill_bytes, ops[k].stack_bytes) for k in ops.kernels
           if ops[k].spill_bytes or ops[k].stack_bytes}
    assert not bad, f"spills/stack (bytes) on {ops.arch}: {bad}"


def _mma_shape(name: str) -> tuple[int, int, int]:
    m, n, k = re.search(r"_(\d+)x(\d+)x(\d+)$", name).groups()
    return int(m), int(n), int(k)


def test_mma_ops_run_on_tensor_cores(ops: tklab.toolchain.compiler.Module) -> None:
    names = [k for k in ops.kernels if k.startswith("mma_")]
    assert len(names) == 5
    for name in names:
        m, n, k = _mma_shape(name)
        # one HMMA.16816 per (16-row block, 8-column block, 16-deep step); the kernel has two code paths
        hmma = ops[name].histogram["HMMA"]
        assert hmma >= (m // 16) * (n // 8) * (k // 16), (ops.arch, name, hmma)
        assert ops[name].histogram["FFMA"] == 0, (ops.arch, name, "products done on the FMA units")


def test_shared_loads_use_ldmatrix_and_cp_async(ops: tklab.toolchain.compiler.Module) -> None:
    for name in (k for k in ops.kernels if k.startswith("s2r_")):
        h = ops[name].histogram
        assert h["LDGSTS"] > 0, (ops.arch, name, "cp.async missing")
        if name.startswith(("s2r_bf16", "s2r_half")):
            assert h["LDSM"] > 0, (ops.arch, name, "ldmatrix missing")
            # stmatrix exists from sm_90 on; sm_80 builds fall back to plain shared stores
            assert (h["STSM"] > 0) == (ops.arch == "sm_90a"), (ops.arch, name, h["STSM"])
        else:
            assert h["LDSM"] == 0 and h["STSM"] == 0, (ops.arch, name, "fp32 has no ldmatrix path")


def test_layout_swaps_use_movmatrix_for_16_bit(ops: tklab.toolchain.compiler.Module) -> None:
    for name in (k for k in ops.kernels if k.startswith("layout_")):
        h = ops[name].histogram
        if "_f32_" in name:
            assert h["SHFL"] > 0 and h["MOVM"] == 0, (ops.arch, name)
        else:
            assert h["MOVM"] > 0, (ops.arch, name)


def test_reductions_shuffle(ops: tklab.toolchain.compiler.Module) -> None:
    for name in (k for k in ops.kernels if k.startswith("reduce_")):
        assert ops[name].histogram["SHFL"] > 0, (ops.arch, name)


def test_gemm_uses_tensor_cores_without_spills(gemm: tklab.toolchain.compiler.Module) -> None:
    k = gemm["gemm_mma_tiles"]
    h = k.histogram
    assert h["HMMA"] >= 64, h["HMMA"]  # BK/16 = 2 steps x (64/16) x (64/8) products per warp per k-slice
    assert h["LDSM"] > 0 and h["LDGSTS"] > 0
    assert k.spill_bytes == 0 and k.stack_bytes == 0, (gemm.arch, k.spill_bytes, k.stack_bytes)
    assert k.registers <= 255


def test_lane_addressing_equals_the_swizzled_offsets() -> None:
    """tests/kernels/lane_addressing.cu proves it with static_asserts: compiling is the check."""
    src = (ROOT / "tests" / "kernels" / "lane_addressing.cu").read_text()
    assert tklab.compile(src, arch="sm_90a").kernels == ["lane_addressing_compiles"]
    broken = src.replace("if (ST::lane_offset(ST::lane(lr, lc), r, c) != ST::byte_offset(r + lr, c + lc))",
                         "if (ST::lane_offset(ST::lane(lr, lc), r, c) != ST::byte_offset(r + lr + 1, c + lc))")
    assert broken != src
    with pytest.raises(tklab.CompileError, match="static assertion"):  # the check can fail
        tklab.compile(broken, arch="sm_90a")


# ALL_CAPS words of three or more letters the library may use: kernels must not define macros named so.
_LIBRARY_CAPS = {"TILE", "WARP_THREADS", "WARPS", "THREADS"}


def test_library_names_cannot_be_rewritten_by_kernel_macros() -> None:
    """Kernels take knobs as ALL_CAPS macros (-DSTAGES=3): the library must not use such words itself,
    or a knob would silently rewrite it (tk.cuh states the rule)."""
    found = {}
    for header in (ROOT / "cuda").rglob("*.cuh"):
        code = re.sub(r"//.*|\"(?:\\.|[^\"\\])*\"", "", header.read_text())  # comments and strings out
        code = re.sub(r"^\s*#.*$", "", code, flags=re.M)  # preprocessor lines (include guards, TK_ macros)
        for word in re.findall(r"\b[A-Z][A-Z0-9_]*[A-Z0-9]\b", code):
            if word not in _LIBRARY_CAPS and not word.startswith("TK_") and len(word) > 2:
                found.setdefault(word, header.relative_to(ROOT).as_posix())
    assert not found, f"ALL_CAPS names in the library (rename them, or add a constant to the rule): {found}"


def test_a_kernel_knob_macro_leaves_the_library_alone() -> None:
    src = '#include "tk.cuh"\nextern "C" __global__ void k() {}\n'
    for knob in ("STAGES", "CONSUMERS", "PRODUCERS", "ROWS", "COUNT", "ID", "HEAD_DIM", "BC", "SCHEDULE"):
        tklab.compile(src, arch="sm_90a", options=(f"-D{knob}=3",))


def test_gemm_declares_its_launch(gemm: tklab.toolchain.compiler.Module) -> None:
    """The kernel exports its dynamic shared memory and threads (tklab.kernels.gemm.launch_facts reads them); the GPU
    test's constant, used where no PTX exists (the CPU emulator), must agree with it."""
    from test_tile_ops_gpu import GEMM_SMEM, GEMM_THREADS

    from tklab import gemm as gemms

    assert gemms.launch_facts(gemm) == {"threads": GEMM_THREADS, "shared_bytes": GEMM_SMEM, "cluster": 1}
