# GENERATED from solutions/drills/ch04_padding.py by `python -m tklab exercises`: fill in the TODOs.
"""Drill ch04_padding (chapter 04, padding): the narrowest padded row that makes a column read conflict-free.

A shared-memory tile has rows of ``cols`` elements of ``itemsize`` bytes (4 or 8), stored with a row
pitch of ``pitch`` elements (pitch >= cols; the extra elements are padding). A warp reads one column:
lane ``lane`` reads row ``lane``. Return the smallest pitch for which that read takes the fewest
wavefronts possible (4-byte elements: the whole warp in one pass; 8-byte elements: a warp is served in
two halves of 16 lanes, 128 bytes each, so one pass per half).

Check: ``tklab.check("ch04_padding")``.
"""


def padded_pitch(cols: int, itemsize: int) -> int:
    # TODO: your code here (about 14 lines).
    # Goal: try pitches from cols upwards; test each with the bank rule, phase by phase
    # Stuck? tklab.hint("ch04_padding") in a notebook, or python -m tklab hint ch04_padding.
    pass
