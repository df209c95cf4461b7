"""Drill ch03_blocks_per_sm (chapter 03, occupancy): how many blocks of a kernel fit on one H100/H200 SM?

A kernel uses ``registers`` per thread, ``threads`` per block and ``smem_bytes`` of shared memory per
block. Return the blocks one SM runs at once (0 when a block cannot launch at all), with Hopper's
limits: 64 warps and 32 blocks per SM; 65,536 registers in four quadrants of 16,384, each warp's
registers taken from one quadrant in units of 256; 228 KB of shared memory, handed out in 128-byte
units, plus 1 KB the system keeps per block.

Check: ``tklab.check("ch03_blocks_per_sm")``.
"""


def blocks_per_sm(registers: int, threads: int, smem_bytes: int) -> int:
    # BEGIN SOLUTION hint: the smallest of four limits: warps, blocks, registers (per quadrant!), shared memory
    warps = -(-threads // 32)
    per_warp = -(-registers * 32 // 256) * 256
    warps_per_quadrant = 16384 // per_warp
    launchable = per_warp * (-(-warps // 4) * 4) <= 65536
    by_registers = warps_per_quadrant * 4 // warps if launchable else 0
    by_smem = 228 * 1024 // (-(-smem_bytes // 128) * 128 + 1024) if smem_bytes else 32
    return min(64 // warps, 32, by_registers, by_smem)
    # END SOLUTION
