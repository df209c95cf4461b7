"""Drill ch07_tma_box (chapter 07, TMA): the bytes a TMA box brings, and the shared memory it spans.

A TMA tile copy loads a box of ``rows`` x ``cols`` elements of ``itemsize`` bytes into shared memory with
a swizzle of ``swizzle`` bytes (0: none; 32, 64 or 128). Return ``(transaction_bytes, shared_bytes)``:
the byte count the mbarrier must expect, and the bytes of shared memory from the box's first byte to
the end of its last row. Return ``(-1, -1)`` for a box TMA refuses: a box row that is not a multiple
of 16 bytes, or wider than the swizzle.

Check: ``tklab.check("ch07_tma_box")``.
"""


def tma_box_bytes(rows: int, cols: int, itemsize: int, swizzle: int) -> tuple[int, int]:
    # BEGIN SOLUTION hint: first the two legality rules; then what arrives, and how far apart the rows land
    row_bytes = cols * itemsize
    if row_bytes % 16 or (swizzle and row_bytes > swizzle):
        return (-1, -1)
    pitch = swizzle if swizzle else row_bytes
    return (rows * row_bytes, rows * pitch)
    # END SOLUTION
