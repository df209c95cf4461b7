# GENERATED from solutions/drills/ch07_mbarrier_parity.py by `python -m tklab exercises`: fill in the TODOs.
"""Drill ch07_mbarrier_parity (chapter 07, mbarriers): does a wait on this parity return?

An mbarrier is initialised with an expected arrival ``count``; ``arrivals`` arrivals have happened since
(no transaction bytes pending). A thread calls ``mbarrier.try_wait.parity`` with ``parity`` (0 or 1).
Return 1 if the wait returns at once, 0 if it waits.

Check: ``tklab.check("ch07_mbarrier_parity")``.
"""


def wait_returns(arrivals: int, count: int, parity: int) -> int:
    # TODO: your code here (about 2 lines).
    # Goal: work out which phase is in progress; a wait on a parity waits for a phase of that parity to
    #       complete
    # Stuck? tklab.hint("ch07_mbarrier_parity") in a notebook, or python -m tklab hint ch07_mbarrier_parity.
    pass
