# GENERATED from solutions/drills/ch08_register_split.py by `python -m tklab exercises`: fill in the TODOs.
"""Drill ch08_register_split (chapter 08, setmaxnreg): the most registers the consumers can take.

A block has ``producers`` producer warpgroups that keep ``producer_regs`` registers per thread after
``setmaxnreg.dec``, and ``consumers`` consumer warpgroups that raise theirs with ``setmaxnreg.inc``.
Return the largest value the consumers may ask for so that every warpgroup's registers fit the SM's
register file at once (0 if none does). setmaxnreg takes 24..256 in steps of 8.

Check: ``tklab.check("ch08_register_split")``.
"""


def consumer_registers(producers: int, consumers: int, producer_regs: int) -> int:
    # TODO: your code here (about 3 lines).
    # Goal: registers left for the consumers per thread, rounded down to what setmaxnreg accepts
    # Stuck? tklab.hint("ch08_register_split") in a notebook, or python -m tklab hint ch08_register_split.
    pass
