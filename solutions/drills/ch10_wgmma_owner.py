"""Drill ch10_wgmma_owner (chapter 10, wgmma accumulators): which thread holds score (row, col)?

``wgmma.m64nNk16`` leaves its 64 x n fp32 accumulator in the 128 threads of a warpgroup, n / 2 registers
per thread. Return ``(thread, i)``: the thread (0..127) holding element (row, col) and which of its
registers it is. (Which rows a thread holds is what chapter 10's softmax relies on.)

Check: ``tklab.check("ch10_wgmma_owner")``.
"""


def d_owner(row: int, col: int, n: int) -> tuple[int, int]:
    # BEGIN SOLUTION hint: each warp owns 16 rows; within them, the mma.sync accumulator layout, repeated every 8 columns
    warp, r = row // 16, row % 16
    g, t = r % 8, (col % 8) // 2
    return 32 * warp + 4 * g + t, 4 * (col // 8) + 2 * (r // 8) + col % 2
    # END SOLUTION
