# GENERATED from solutions/drills/ch05_ldmatrix.py by `python -m tklab exercises`: fill in the TODOs.
"""Drill ch05_ldmatrix (chapter 05, ldmatrix): what does each lane receive from ldmatrix.x4?

``ldmatrix.sync.aligned.m8n8.x4.b16`` loads four 8 x 8 matrices of 16-bit elements; each lane receives
2 elements of each matrix (one 32-bit register per matrix, the low half first), 8 elements in all.
Return ``(matrix, row, col)`` of element ``i`` (0..7) received by ``lane``.

Check: ``tklab.check("ch05_ldmatrix")``.
"""


def ldmatrix_element(lane: int, i: int) -> tuple[int, int, int]:
    # TODO: your code here (about 2 lines).
    # Goal: register r holds matrix r; within a matrix a lane gets a row and two neighbouring columns
    # Stuck? tklab.hint("ch05_ldmatrix") in a notebook, or python -m tklab hint ch05_ldmatrix.
    pass
