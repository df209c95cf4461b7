// The interleaved layout: wgmma's "no swizzle" operand layout, as a swizzle policy for st<>.
//
// Without swizzling, wgmma does not read a plain row-major tile. Its unit is the *core matrix*: 8 rows
// of 16 bytes stored contiguously (128 bytes). A plain tile whose rows are wider than 16 bytes keeps
// those 8 rows far apart, so wgmma cannot describe it. Cutting the tile into panels 16 bytes wide (8
// bf16 columns) with rows 16 bytes apart makes every 8 consecutive rows of a panel one core matrix:
//     st<bf16, 64, 64, tk::interleave>   = 8 panels of 64 rows x 16 bytes, no XOR.
// It is also a layout TMA writes (one 16-byte-wide box per panel, swizzle NONE) -- tklab.tma with
// swizzle=16. It is slower than the swizzled layouts for ldmatrix (bank conflicts); use it to learn.
#pragma once

#include "../common/common.cuh"

namespace tk {

struct interleave {
    static constexpr int bytes = 16;       // panel width: one 16-byte chunk
    static constexpr int alignment = 128;  // TMA writes shared memory at 128-byte-aligned addresses
    __host__ __device__ static constexpr uint32_t apply(uint32_t byte) { return byte; }
};

}  // namespace tk
