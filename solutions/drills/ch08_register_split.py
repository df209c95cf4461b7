"""Drill ch08_register_split (chapter 08, setmaxnreg): the most registers the consumers can take.

A block has ``producers`` producer warpgroups that keep ``producer_regs`` registers per thread after
``setmaxnreg.dec``, and ``consumers`` consumer warpgroups that raise theirs with ``setmaxnreg.inc``.
Return the largest value the consumers may ask for so that every warpgroup's registers fit the SM's
register file at once (0 if none does). setmaxnreg takes 24..256 in steps of 8.

Check: ``tklab.check("ch08_register_split")``.
"""


def consumer_registers(producers: int, consumers: int, producer_regs: int) -> int:
    # BEGIN SOLUTION hint: registers left for the consumers per thread, rounded down to what setmaxnreg accepts
    left = 65536 // 128 - producers * producer_regs
    per_thread = min(256, left // consumers // 8 * 8)
    return per_thread if per_thread >= 24 else 0
    # END SOLUTION
