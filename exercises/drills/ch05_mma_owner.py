# GENERATED from solutions/drills/ch05_mma_owner.py by `python -m tklab exercises`: fill in the TODOs.
"""Drill ch05_mma_owner (chapter 05, fragments): which lane of a warp holds element (row, col) of A?

``mma.sync.m16n8k16`` takes its 16 x 16 bf16 operand A spread over the 32 lanes of a warp, 8 elements
per lane (4 registers of two bf16 each, element i in register i // 2, the low half first). Return
``(lane, i)``: the lane holding A[row][col] and which of its 8 elements it is.

Check: ``tklab.check("ch05_mma_owner")``.
"""


def a_owner(row: int, col: int) -> tuple[int, int]:
    # TODO: your code here (about 4 lines).
    # Goal: lane = 4·group + thread-in-group; the four registers cover the four 8x8 quarters
    # Stuck? tklab.hint("ch05_mma_owner") in a notebook, or python -m tklab hint ch05_mma_owner.
    pass
