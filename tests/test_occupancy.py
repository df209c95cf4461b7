"""occupancy.occupancy against the CUDA occupancy calculator's rules (cuda_occupancy.h, compute capability 9.0).

The reference below is a line-by-line transcription of the calculator's three limits (warps, registers,
shared memory) as NVIDIA's header computes them, written independently of ``occupancy.occupancy``; the
worked cases are the calculator's own outputs for the shapes chapter 03 and issue reports use.
"""

from __future__ import annotations

import itertools

import pytest

from tklab import occupancy
from tklab.run.limits import SHARED_OPTIN

# Device properties the calculator reads for an H100/H200 (cudaDeviceProp of sm_90).
PROPS = {"regsPerMultiprocessor": 65536, "regsPerBlock": 65536, "warpSize": 32, "maxThreadsPerMultiProcessor": 2048,
         "maxBlocksPerMultiProcessor": 32, "sharedMemPerMultiprocessor": 233472, "reservedSharedMemPerBlock": 1024}
REG_GRANULARITY, SUB_PARTITIONS, SMEM_GRANULARITY = 256, 4, 128


def _round_up(x: int, y: int) -> int:
    return (x + y - 1) // y * y


def calculator(regs: int, block: int, smem: int) -> int:
    """cudaOccMaxActiveBlocksPerMultiprocessor for one kernel (no partitioned global caching, default carveout)."""
    warps_per_cta = (block + PROPS["warpSize"] - 1) // PROPS["warpSize"]
    # cudaOccMaxBlocksPerSMWarpsLimit / BlocksLimit
    warp_limit = (PROPS["maxThreadsPerMultiProcessor"] // PROPS["warpSize"]) // warps_per_cta
    block_limit = PROPS["maxBlocksPerMultiProcessor"]
    # cudaOccMaxBlocksPerSMRegsLimit
    regs_per_warp = _round_up(regs * PROPS["warpSize"], REG_GRANULARITY)
    regs_per_cta = regs_per_warp * warps_per_cta
    regs_assumed = regs_per_warp * _round_up(warps_per_cta, SUB_PARTITIONS)  # the hardware's launch check
    if PROPS["regsPerBlock"] < regs_assumed or PROPS["regsPerBlock"] < regs_per_cta:
        reg_limit = 0
    else:
        warps_per_sub_partition = (PROPS["regsPerMultiprocessor"] // SUB_PARTITIONS) // regs_per_warp
        reg_limit = warps_per_sub_partition * SUB_PARTITIONS // warps_per_cta
    # cudaOccMaxBlocksPerSMSmemLimit
    if smem > 0:
        smem_per_cta = _round_up(smem + PROPS["reservedSharedMemPerBlock"], SMEM_GRANULARITY)
        smem_limit = PROPS["sharedMemPerMultiprocessor"] // smem_per_cta
    else:
        smem_limit = block_limit
    return min(warp_limit, block_limit, reg_limit, smem_limit)


@pytest.mark.parametrize(("regs", "threads", "blocks", "pooled"), [
    (200, 64, 4, 5),  # 6400 per warp: 2 per 16384-register quadrant (3584 left in each), 8 warps
    (48, 64, 20, 21),  # 1536 per warp: 10 per quadrant (1024 left), 40 warps
    (127, 256, 2, 2),  # chapter 03's 8x8 kernel: 4096 per warp, 4 per quadrant, 16 warps
    (224, 128, 2, 2),  # chapter 05's GEMM: 7168 per warp, 2 per quadrant
    (40, 512, 3, 3),
])
def test_worked_cases(regs: int, threads: int, blocks: int, pooled: int) -> None:
    occ = occupancy.occupancy(regs, threads)
    assert occ.by["registers"] == blocks == calculator(regs, threads, 0)
    assert occupancy.pooled_register_blocks(regs, threads) == pooled
    per_warp = _round_up(32 * regs, 256)
    assert (occ.registers_per_warp, occ.warps_per_quadrant) == (per_warp, 16384 // per_warp)


def test_matches_the_calculator_everywhere() -> None:
    """Every register count, a spread of block sizes and shared-memory sizes: same blocks per SM."""
    smems = (0, 1, 4096, 18944, 50176, 100 * 1024, SHARED_OPTIN[90])  # up to the most one block may ask for
    for regs, threads, smem in itertools.product(range(1, 256), (32, 64, 96, 128, 192, 256, 384, 512, 1024),
                                                 smems):
        occ = occupancy.occupancy(regs, threads, smem)
        assert occ.blocks_per_sm == calculator(regs, threads, smem), (regs, threads, smem, occ)
        assert occ.blocks_per_sm == min(occ.by.values())


def test_the_quadrant_rule_differs_from_one_pool() -> None:
    """The pooled formula over-counts for many shapes; a lesson that showed it would teach a wrong number."""
    differ = [(r, t) for r in range(8, 256, 8) for t in (64, 128, 192)
              if occupancy.occupancy(r, t).by["registers"] != occupancy.pooled_register_blocks(r, t)]
    assert (200, 64) in differ and (48, 64) in differ
    for r, t in differ:
        assert occupancy.occupancy(r, t).by["registers"] < occupancy.pooled_register_blocks(r, t)


def test_a_block_too_big_for_the_register_file_cannot_launch() -> None:
    occ = occupancy.occupancy(255, 1024)  # 8192 registers per warp x 32 warps = 4x the register file
    assert occ.blocks_per_sm == 0 and occ.limit == "registers"
    assert calculator(255, 1024, 0) == 0
    # 3 warps of 8192 registers: the hardware's launch check counts them as 4 (one per quadrant), still fits
    assert occupancy.occupancy(255, 96).by["registers"] == calculator(255, 96, 0)


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="registers per thread"):
        occupancy.occupancy(0, 128)
    with pytest.raises(ValueError, match="threads per block"):
        occupancy.occupancy(32, 1025)
    with pytest.raises(ValueError, match="shared memory"):
        occupancy.occupancy(32, 128, -1)


def test_quadrant_figure_draws_every_resident_warp() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.patches import Rectangle

    ax = occupancy.quadrant_figure(200, 64)
    boxes = [p for p in ax.patches if isinstance(p, Rectangle)]
    occ = occupancy.occupancy(200, 64)
    warps = [p for p in boxes if p.get_height() == occ.registers_per_warp]
    assert len(warps) == occ.warps_per_sm == 8
    assert "4 blocks" in ax.get_title() and "one pool would say 5" in ax.get_title()
    assert sum("3584 left" == t.get_text() for t in ax.texts) == 4
