# GENERATED from solutions/drills/ch03_blocks_per_sm.py by `python -m tklab exercises`: fill in the TODOs.
"""Drill ch03_blocks_per_sm (chapter 03, occupancy): how many blocks of a kernel fit on one H100/H200 SM?

A kernel uses ``registers`` per thread, ``threads`` per block and ``smem_bytes`` of shared memory per
block. Return the blocks one SM runs at once (0 when a block cannot launch at all), with Hopper's
limits: 64 warps and 32 blocks per SM; 65,536 registers in four quadrants of 16,384, each warp's
registers taken from one quadrant in units of 256; 228 KB of shared memory, handed out in 128-byte
units, plus 1 KB the system keeps per block.

Check: ``tklab.check("ch03_blocks_per_sm")``.
"""


def blocks_per_sm(registers: int, threads: int, smem_bytes: int) -> int:
    # TODO: your code here (about 7 lines).
    # Goal: the smallest of four limits: warps, blocks, registers (per quadrant!), shared memory
    # Stuck? tklab.hint("ch03_blocks_per_sm") in a notebook, or python -m tklab hint ch03_blocks_per_sm.
    pass
