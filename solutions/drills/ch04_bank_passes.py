"""Drill ch04_bank_passes (chapter 04, banks): how many passes does a strided shared-memory read take?

Lane ``lane`` of a warp reads the 4-byte word number ``lane * stride`` of shared memory (32 banks, word
w in bank w mod 32). Return the wavefronts (passes) the read takes: a bank serves one distinct word per
pass, and lanes reading the same word share it.

Check: ``tklab.check("ch04_bank_passes")``.
"""


def bank_passes(stride: int) -> int:
    # BEGIN SOLUTION hint: group the distinct words by bank; the busiest bank sets the count
    words = {lane * stride for lane in range(32)}
    per_bank = [0] * 32
    for w in words:
        per_bank[w % 32] += 1
    return max(per_bank)
    # END SOLUTION
