# GENERATED from solutions/drills/ch04_bank_passes.py by `python -m tklab exercises`: fill in the TODOs.
"""Drill ch04_bank_passes (chapter 04, banks): how many passes does a strided shared-memory read take?

Lane ``lane`` of a warp reads the 4-byte word number ``lane * stride`` of shared memory (32 banks, word
w in bank w mod 32). Return the wavefronts (passes) the read takes: a bank serves one distinct word per
pass, and lanes reading the same word share it.

Check: ``tklab.check("ch04_bank_passes")``.
"""


def bank_passes(stride: int) -> int:
    # TODO: your code here (about 5 lines).
    # Goal: group the distinct words by bank; the busiest bank sets the count
    # Stuck? tklab.hint("ch04_bank_passes") in a notebook, or python -m tklab hint ch04_bank_passes.
    pass
