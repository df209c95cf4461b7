"""Drill ch06_rt_layout (chapter 06, register tiles): which element of a 16 x 16 register tile is a lane's i-th?

The tile library's ``rt<bf16, 16, 16>`` (row layout) spreads a 16 x 16 tile over a warp: each lane holds
4 registers of two elements each (element i in register i // 2, the low half first). Return
``(row, col)`` of element ``i`` (0..7) of ``lane``.

Check: ``tklab.check("ch06_rt_layout")``.
"""


def rt_element(lane: int, i: int) -> tuple[int, int]:
    # BEGIN SOLUTION hint: the same layout as mma's A operand: group and thread-in-group, four 8x8 quarters
    g, t = lane // 4, lane % 4
    register, half = i // 2, i % 2
    return g + 8 * (register % 2), 2 * t + half + 8 * (register // 2)
    # END SOLUTION
