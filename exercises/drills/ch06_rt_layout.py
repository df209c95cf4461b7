# GENERATED from solutions/drills/ch06_rt_layout.py by `python -m tklab exercises`: fill in the TODOs.
"""Drill ch06_rt_layout (chapter 06, register tiles): which element of a 16 x 16 register tile is a lane's i-th?

The tile library's ``rt<bf16, 16, 16>`` (row layout) spreads a 16 x 16 tile over a warp: each lane holds
4 registers of two elements each (element i in register i // 2, the low half first). Return
``(row, col)`` of element ``i`` (0..7) of ``lane``.

Check: ``tklab.check("ch06_rt_layout")``.
"""


def rt_element(lane: int, i: int) -> tuple[int, int]:
    # TODO: your code here (about 3 lines).
    # Goal: the same layout as mma's A operand: group and thread-in-group, four 8x8 quarters
    # Stuck? tklab.hint("ch06_rt_layout") in a notebook, or python -m tklab hint ch06_rt_layout.
    pass
