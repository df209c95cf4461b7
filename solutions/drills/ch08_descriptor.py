"""Drill ch08_descriptor (chapter 08, wgmma): a shared-memory matrix descriptor, field by field.

A wgmma operand in shared memory is described by a 64-bit descriptor. Return the descriptor (an integer)
of an operand at shared-memory byte ``address``, with leading byte offset ``lbo``, stride byte offset
``sbo`` (both in bytes) and a swizzle of ``swizzle`` bytes (0: none; 32, 64 or 128), the base-offset
field left 0. Addresses and offsets are stored in 16-byte units, in 14-bit fields.

Check: ``tklab.check("ch08_descriptor")``.
"""


def descriptor(address: int, lbo: int, sbo: int, swizzle: int) -> int:
    # BEGIN SOLUTION hint: four fields at four bit positions; the swizzle is a 2-bit code, not the byte count
    def field(x: int) -> int:
        return (x & 0x3FFFF) >> 4

    code = {0: 0, 128: 1, 64: 2, 32: 3}[swizzle]
    return field(address) | field(lbo) << 16 | field(sbo) << 32 | code << 62
    # END SOLUTION
