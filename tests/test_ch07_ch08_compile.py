"""Chapters 07-08 on the CPU: what the compiler made of every new Hopper kernel (TMA, wgmma, TMA stores,
clusters and multicast in SASS/PTX; no spills; no ptxas serialization warning), what the kernels tell the
launcher (threads, shared memory, cluster size), the grouped tile order, and the shape rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tklab
from tklab import gemm, sass, tma_copy
from tklab.run.limits import SHARED_OPTIN

RING_TILE_BYTES = tma_copy.TILE_ROWS * tma_copy.TILE_COLS * 4  # one stage of the ring: a tile of floats


def _gemm_shared(step: str, stages: int = 4, c_tiles: int = 0) -> int:
    """A GEMM step's dynamic shared memory as its layout says: ``stages`` x (A's block_m x BK slice + B's BK x
    block_n slice) in bf16 [+ ``c_tiles`` C staging tiles and the barriers, rounded to 1024] + 1024 alignment slack."""
    s = gemm.get(step)
    ring = stages * (s.block_m * gemm.BK + gemm.BK * s.block_n) * 2
    staging = c_tiles * gemm.C_BOX[0] * gemm.C_BOX[1] * 2 + 1024 if c_tiles else 0
    return ring + staging + 1024

ROOT = Path(__file__).resolve().parent.parent
SERIALIZED = re.compile(r"\bC75\d\d\b")  # ptxas: "wgmma.mma_async instructions are serialized ..."
VARIANTS = gemm.VARIANTS
ALL_STEPS = dict(gemm.STEPS) | VARIANTS


def _ops(kernel: tklab.toolchain.compiler.Kernel) -> dict[str, int]:
    return dict(sass.histogram(kernel.sass, full=True))


def _count(ops: dict[str, int], prefix: str) -> int:
    return sum(n for op, n in ops.items() if op == prefix or op.startswith(prefix + "."))


@pytest.mark.parametrize("name", list(ALL_STEPS))
def test_every_gemm_step_is_tma_and_wgmma_without_spills_or_serialization(name: str) -> None:
    s = ALL_STEPS[name]
    k = gemm.compiled(s)
    ops = _ops(k)
    assert not [ln for ln in k.module.log.splitlines() if SERIALIZED.search(ln)], k.module.log
    assert k.spill_bytes == 0 and k.stack_bytes == 0 and _count(ops, "LDL") == _count(ops, "STL") == 0
    hgmma = [ln for ln in k.sass.splitlines() if "HGMMA" in ln]
    assert len(hgmma) == 4 and all("64x256x16" in ln and "tnspB" in ln for ln in hgmma)  # 4 k16 steps, B MN-major
    assert _count(ops, "UTMALDG") > 0
    assert "C7508" not in k.module.log  # setmaxnreg was honoured
    if s.persistent:
        assert _count(ops, "UTMASTG") > 0 and _count(ops, "STSM") > 0  # C leaves via stmatrix + TMA store
        # C leaves only by TMA; stream-K's split tiles leave 32 float4 of fp32 partial sums per thread (and flags)
        assert _count(ops, "STG") == (ops.get("STG.E.128.STRONG.GPU", 0) + 2 if s.stream_k else 0)
        assert ops.get("STG.E.128.STRONG.GPU", 0) == (32 if s.stream_k else 0)
    else:
        assert _count(ops, "UTMASTG") == 0 and _count(ops, "STG") > 0


def test_the_main_loop_keeps_descriptors_in_uniform_registers() -> None:
    """The review of the old kernel found ~30 integer ops and an R2UR per HGMMA in the K loop (descriptors
    rebuilt from a per-thread consumer index). Now the consumer index is warp-uniform and a slice's
    descriptor is the tile's plus a constant: no R2UR in the loop, and few instructions around 4 HGMMA."""
    for name in ("2_warp_specialised", "3_persistent", "5_cluster", "6_stream_k", "6_stream_k_c1"):
        loop = [op.split(".")[0] for op in sass.main_loop(gemm.compiled(ALL_STEPS[name]).sass)]
        assert loop.count("HGMMA") == 4, name
        assert "R2UR" not in loop, (name, loop)
        assert len(loop) < 80, (name, len(loop))


def test_in_flight_groups_no_longer_serialize() -> None:
    """IN_FLIGHT=1 used to compile to serialized wgmma (C7515, a WARPGROUP.DEPBAR after every HGMMA):
    zero(acc) sat inside an open wgmma group. With the scale-d flag the loop waits once per stage only."""
    loop = [op.split(".")[0] for op in sass.main_loop(gemm.compiled(VARIANTS["2_in_flight_1"]).sass)]
    assert loop.count("HGMMA") == 4 and loop.count("WARPGROUP") <= 2  # one arrive before the group, one wait after it


SERIALIZING = r"""
#include "tk.cuh"
using namespace tk;
extern "C" __global__ void __launch_bounds__(128) k(float* out, int n) {
    __shared__ st_bf<64, 64> a, b;
    rt_fl<16, 64> d;
    for (int i = 0; i < n; ++i) {
        zero(d);                             // moves into the accumulator d ...
        warpgroup::mma_AB(d, a, b);
        warpgroup::mma_async_wait<1>();      // ... while the previous group may still write it
    }
    warpgroup::mma_async_wait<0>(d);
    out[threadIdx.x] = d.tiles[0][0].data[0].x;
}
"""


def test_the_serialization_check_can_fail() -> None:
    """The warning the tests and the ch08 check look for is real: this kernel provokes it."""
    mod = tklab.compile(SERIALIZING, arch="sm_90a", name="serializing.cu")
    assert [ln for ln in mod.log.splitlines() if SERIALIZED.search(ln)]

    from tklab.grading.spec_kit import NoSerializedWgmma, StaticContext
    from tklab.grading.specs import get

    ctx = StaticContext(get("ch08_wgmma"), SERIALIZING, "serializing.cu", "sm_90a", mod, mod["k"])
    res = NoSerializedWgmma().run(ctx)
    assert not res.ok and "C75" in res.detail and "k > 0" in res.detail


@pytest.mark.parametrize(("name", "warpgroups", "c_tiles", "cluster"), [
    ("1_one_warpgroup", 1, 0, 1),
    ("2_warp_specialised", 3, 0, 1),  # a producer and two consumers
    ("3_persistent", 3, 4, 1),  # two staging tiles of C per consumer
    ("5_cluster", 3, 4, 2),
])
def test_kernels_tell_the_launcher_their_threads_shared_memory_and_cluster(name, warpgroups, c_tiles, cluster) -> None:
    k = gemm.compiled(gemm.get(name))
    facts = gemm.launch_facts(k.module)
    shared = _gemm_shared(name, c_tiles=c_tiles)
    assert facts == {"threads": 128 * warpgroups, "shared_bytes": shared, "cluster": cluster}
    assert shared + k.shared_bytes <= SHARED_OPTIN[90]  # the H100/H200 per-block opt-in limit


def test_the_exercise_spec_launches_what_the_exercise_kernel_declares() -> None:
    """ch08_wgmma's spec computes the launch (a sandboxed run cannot read it from the kernel): it must be
    what the exercise's own kernel says, at its default ring and with the -D options the check passes."""
    from tklab import specs

    spec = specs.get("ch08_wgmma")
    mod = tklab.compile((ROOT / spec.solution).read_text(), arch="sm_90a", name=spec.filename, options=spec.options)
    facts = gemm.launch_facts(mod)
    shape = spec.launch({"M": 192, "N": 512, "K": 320})
    assert (shape.shared_mem, shape.block, facts["cluster"]) == (facts["shared_bytes"], (facts["threads"],), 1)
    assert shape.grid == (512 // gemm.get("1_one_warpgroup").block_n, 192 // gemm.get("1_one_warpgroup").block_m)


def test_cluster_launch_is_declared_in_the_kernel() -> None:
    """__cluster_dims__ puts the shape in the PTX (.reqnctapercluster): a plain launch starts pairs of blocks."""
    ptx = gemm.compiled(gemm.get("5_cluster")).module.ptx
    assert ".explicitcluster" in ptx and re.search(r"\.reqnctapercluster\s+2, 1, 1", ptx)
    ops = _ops(gemm.compiled(gemm.get("5_cluster")))
    assert ops.get("UTMALDG.2D.MULTICAST", 0) > 0  # B arrives by multicast
    assert _count(ops, "SYNCS.ARRIVE.TRANS64.RED") > 0  # consumers arrive on the partner's barrier (mapa)
    for name in ("3_persistent", "4_l2_order"):
        ptx1 = gemm.compiled(gemm.get(name)).module.ptx
        assert ".reqnctapercluster" not in ptx1 and "MULTICAST" not in str(_ops(gemm.compiled(gemm.get(name))))


def test_launch_facts_need_the_kernels_declarations() -> None:
    mod = tklab.compile('extern "C" __global__ void gemm() {}', arch="sm_90a", name="bare.cu")
    with pytest.raises(ValueError, match="gemm_shared_bytes"):
        gemm.launch_facts(mod)


# ---- the tile order ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("rows", "cols", "group"), [(32, 16, 16), (7, 5, 3), (5, 9, 1), (3, 4, 8), (64, 32, 16)])
def test_grouped_order_visits_every_tile_once(rows, cols, group) -> None:
    seen = [gemm.tile_order(rows, cols, group, i) for i in range(rows * cols)]
    assert sorted(seen) == [(r, c) for r in range(rows) for c in range(cols)]
    if group == 1:
        assert seen == [(r, c) for r in range(rows) for c in range(cols)]  # row-major
    else:
        assert seen[:min(group, rows)] == [(r, 0) for r in range(min(group, rows))]  # down first


def test_device_tile_order_is_the_python_model() -> None:
    """tk::tile_order is constexpr: NVRTC evaluates it at compile time against the Python model's values."""
    cases = [(7, 5, 3), (32, 16, 16), (5, 9, 1), (3, 4, 8)]
    asserts = [f"static_assert(tk::tile_order{{{r}, {c}, {g}}}({i}).r == {gemm.tile_order(r, c, g, i)[0]} && "
               f"tk::tile_order{{{r}, {c}, {g}}}({i}).c == {gemm.tile_order(r, c, g, i)[1]});"
               for r, c, g in cases for i in range(r * c)]
    src = '#include "tk.cuh"\n' + "\n".join(asserts) + '\nextern "C" __global__ void k() {}\n'
    tklab.compile(src, arch="sm_80", name="tile_order.cu")  # plain C++: any architecture


# ---- shapes ------------------------------------------------------------------------------------------------
def test_shape_rules_name_the_problem() -> None:
    for name in ("3_persistent", "5_cluster"):
        s = gemm.get(name)
        for shape in ((1000, 1000, 1000), (4096, 4000, 1032), (1, 8, 8), (129, 264, 72)):
            gemm.check_shapes(s, *shape)  # any M; N, K multiples of 8
        with pytest.raises(ValueError, match="N=1001 is not a multiple of 8"):
            gemm.check_shapes(s, 1000, 1001, 1000)
        with pytest.raises(ValueError, match="K=12 is not a multiple of 8"):
            gemm.check_shapes(s, 64, 64, 12)
    gemm.check_shapes(VARIANTS["6_stream_k"], 64, 64, gemm.STREAM_K_MAX_K)
    with pytest.raises(ValueError, match="32-bit arithmetic"):
        gemm.check_shapes(VARIANTS["6_stream_k"], 64, 64, gemm.STREAM_K_MAX_K + 8)
    with pytest.raises(ValueError, match="M=100 is not a multiple of 128"):
        gemm.check_shapes(gemm.get("2_warp_specialised"), 100, 256, 64)
    with pytest.raises(ValueError, match="M: 64, N: 256"):
        gemm.check_shapes(gemm.get("1_one_warpgroup"), 64, 200, 64)
    with pytest.raises(ValueError, match="empty"):
        gemm.check_shapes(gemm.get("5_cluster"), 0, 8, 8)
    with pytest.raises(KeyError, match="steps: 1_one_warpgroup"):
        gemm.get("6_magic")


def test_gemm_refuses_mismatched_matrices_before_anything_runs() -> None:
    import numpy as np

    with pytest.raises(ValueError, match="inner dimensions differ"):
        gemm.gemm(np.zeros((128, 64)), np.zeros((128, 256)))
    with pytest.raises(ValueError, match="matrices"):
        gemm.gemm(np.zeros((2, 128, 64)), np.zeros((64, 256)))


# ---- chapter 07's copies -------------------------------------------------------------------------------
def test_copy_kernels_use_the_unit_they_are_about() -> None:
    mod = tklab.compile((ROOT / "solutions" / "tma_copy.cu").read_text(), arch="sm_90a", name="tma_copy.cu")
    per_thread, cp_async, tma = (_ops(mod[k]) for k in ("copy_per_thread", "copy_cp_async", "copy_tma"))
    assert per_thread.get("LDG.E.128", 0) and per_thread.get("STG.E.128", 0)
    assert _count(cp_async, "LDGSTS") and _count(cp_async, "STG") and not _count(cp_async, "UTMALDG")
    assert _count(tma, "UTMALDG") == 1 and _count(tma, "UTMASTG") == 1 and not _count(tma, "STG")
    assert mod["copy_tma"].registers < 16  # one thread hands the copy engine a descriptor: nearly no registers


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 6, 8])
def test_ring_builds_for_every_stage_count_of_the_sweep(stages: int) -> None:
    src = (ROOT / "solutions" / "ch07_tma_ring" / "ch07_tma_ring.cu").read_text()
    k = tklab.compile(src, arch="sm_90a", name="ch07_tma_ring.cu", options=(f"-DSTAGES={stages}",))["ring_copy"]
    assert k.spill_bytes == 0 and _count(_ops(k), "UTMALDG") == 1
    blocks, threads, smem = tma_copy.ring_launch(16384, 8192, stages)
    assert (blocks, threads, smem) == (132, tma_copy.RING_THREADS, stages * RING_TILE_BYTES + 1024)
    assert smem == k.module.constants["ring_shared_bytes"]  # the model (for sandboxed checks) is the kernel's
    assert re.search(rf"\.maxntid\s+{threads}, 1, 1", k.module.ptx)
    assert smem + k.shared_bytes <= SHARED_OPTIN[90]


def test_ring_launch_and_way_shapes() -> None:
    assert tma_copy.ring_launch(100, 68, 2) == (4, tma_copy.RING_THREADS, 2 * RING_TILE_BYTES + 1024)  # 2 x 2 tiles
    with pytest.raises(ValueError, match="stages must be"):
        tma_copy.ring_launch(64, 64, 0)


def test_knob_names_of_these_kernels_leave_the_library_alone() -> None:
    src = '#include "tk.cuh"\nextern "C" __global__ void k() {}\n'
    for knob in ("CLUSTER", "GROUP_M", "CN", "ROWS", "C_TYPE", "IN_FLIGHT", "CLUSTER_SHAPE", "PER_LANE",
                 "CONSUMER_WARPS"):
        tklab.compile(src, arch="sm_90a", options=(f"-D{knob}=3",))
