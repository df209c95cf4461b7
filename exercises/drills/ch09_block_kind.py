# GENERATED from solutions/drills/ch09_block_kind.py by `python -m tklab exercises`: fill in the TODOs.
"""Drill ch09_block_kind (chapter 09, causal blocks): does the kernel skip, compute or mask block (i, j)?

Attention over ``seq`` tokens is computed in blocks: query block ``i`` (rows ``i * block_rows`` ..) meets
key block ``j`` (keys ``j * block_keys`` ..). Return 0 if the kernel skips the block (causal, and every
key is after every query row of the block), 2 if it computes it but must mask some scores (causal keys
after a row, or keys past the end of the sequence), 1 if it computes it whole. ``causal`` is 0 or 1.

Check: ``tklab.check("ch09_block_kind")``.
"""


def block_kind(i: int, j: int, seq: int, block_rows: int, block_keys: int, causal: int) -> int:
    # TODO: your code here (about 7 lines).
    # Goal: compare the block's first and last key with its first and last query row
    # Stuck? tklab.hint("ch09_block_kind") in a notebook, or python -m tklab hint ch09_block_kind.
    pass
