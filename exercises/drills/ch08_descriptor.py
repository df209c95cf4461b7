# GENERATED from solutions/drills/ch08_descriptor.py by `python -m tklab exercises`: fill in the TODOs.
"""Drill ch08_descriptor (chapter 08, wgmma): a shared-memory matrix descriptor, field by field.

A wgmma operand in shared memory is described by a 64-bit descriptor. Return the descriptor (an integer)
of an operand at shared-memory byte ``address``, with leading byte offset ``lbo``, stride byte offset
``sbo`` (both in bytes) and a swizzle of ``swizzle`` bytes (0: none; 32, 64 or 128), the base-offset
field left 0. Addresses and offsets are stored in 16-byte units, in 14-bit fields.

Check: ``tklab.check("ch08_descriptor")``.
"""


def descriptor(address: int, lbo: int, sbo: int, swizzle: int) -> int:
    # TODO: your code here (about 4 lines).
    # Goal: four fields at four bit positions; the swizzle is a 2-bit code, not the byte count
    # Stuck? tklab.hint("ch08_descriptor") in a notebook, or python -m tklab hint ch08_descriptor.
    pass
