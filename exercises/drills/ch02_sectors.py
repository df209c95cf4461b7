# GENERATED from solutions/drills/ch02_sectors.py by `python -m tklab exercises`: fill in the TODOs.
"""Drill ch02_sectors (chapter 02, coalescing): how many 32-byte sectors does one warp's load touch?

Lane ``lane`` (0..31) of a warp loads element ``lane * stride`` of an array of ``itemsize``-byte elements
that starts on a 128-byte boundary. Device memory is read in 32-byte sectors: return how many distinct
sectors the warp's request touches (stride 0: every lane reads the same element).

Check: ``tklab.check("ch02_sectors")``, or ``python -m tklab check exercises/drills/ch02_sectors.py``.
"""


def sectors(stride: int, itemsize: int) -> int:
    # TODO: your code here (about 2 lines).
    # Goal: count the distinct sectors the 32 lanes' byte addresses fall into
    # Stuck? tklab.hint("ch02_sectors") in a notebook, or python -m tklab hint ch02_sectors.
    pass
