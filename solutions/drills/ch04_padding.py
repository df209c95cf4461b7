"""Drill ch04_padding (chapter 04, padding): the narrowest padded row that makes a column read conflict-free.

A shared-memory tile has rows of ``cols`` elements of ``itemsize`` bytes (4 or 8), stored with a row
pitch of ``pitch`` elements (pitch >= cols; the extra elements are padding). A warp reads one column:
lane ``lane`` reads row ``lane``. Return the smallest pitch for which that read takes the fewest
wavefronts possible (4-byte elements: the whole warp in one pass; 8-byte elements: a warp is served in
two halves of 16 lanes, 128 bytes each, so one pass per half).

Check: ``tklab.check("ch04_padding")``.
"""


def padded_pitch(cols: int, itemsize: int) -> int:
    # BEGIN SOLUTION hint: try pitches from cols upwards; test each with the bank rule, phase by phase
    lanes_per_phase = 128 // itemsize if itemsize > 4 else 32
    pitch = cols
    while True:
        ok = True
        for first in range(0, 32, lanes_per_phase):
            banks: dict[int, set[int]] = {}
            for lane in range(first, first + lanes_per_phase):
                byte = lane * pitch * itemsize
                for word in range(byte // 4, (byte + itemsize) // 4):
                    banks.setdefault(word % 32, set()).add(word)
            ok = ok and max(len(w) for w in banks.values()) == 1
        if ok:
            return pitch
        pitch += 1
    # END SOLUTION
