"""Drill ch02_sectors (chapter 02, coalescing): how many 32-byte sectors does one warp's load touch?

Lane ``lane`` (0..31) of a warp loads element ``lane * stride`` of an array of ``itemsize``-byte elements
that starts on a 128-byte boundary. Device memory is read in 32-byte sectors: return how many distinct
sectors the warp's request touches (stride 0: every lane reads the same element).

Check: ``tklab.check("ch02_sectors")``, or ``python -m tklab check exercises/drills/ch02_sectors.py``.
"""


def sectors(stride: int, itemsize: int) -> int:
    # BEGIN SOLUTION hint: count the distinct sectors the 32 lanes' byte addresses fall into
    touched = {(lane * stride * itemsize) // 32 for lane in range(32)}
    return len(touched)
    # END SOLUTION
