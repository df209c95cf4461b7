// Where each element of a 16x16 register subtile lives: the fragment layout.
//
// The tensor core's mma.m16n8k16 instruction dictates it. A warp's 32 lanes are split as lane = 4g + t
// (g = lane/4 in 0..7, the "group"; t = lane%4, the thread in the group). For the A operand (16x16,
// row-major) lane (g, t) holds, in four 32-bit registers, the pairs
//
//     [0] row g,   cols 2t, 2t+1        [2] row g,   cols 2t+8, 2t+9
//     [1] row g+8, cols 2t, 2t+1        [3] row g+8, cols 2t+8, 2t+9
//
// i.e. the subtile cut into four 8x8 quadrants (k&1 picks the row half, k>>1 the column half), each
// quadrant spread so that a row is owned by the 4 lanes of one group, two neighbours per lane. The
// fp32 accumulator C of two side-by-side m16n8 products has the very same shape, which is why a row
// tile works as A operand, accumulator, and (on Hopper) as the wgmma accumulator of one warp.
//
// The `col` layout stores the TRANSPOSED subtile that way: pair [k] holds rows 2t+8(k>>1), +1 of
// column g+8(k&1). That is exactly the mma B operand ("col" = column-major K x N), and it is what
// ldmatrix.trans produces from a row-major tile in shared memory.
#pragma once

#include "../../common/traits.cuh"

namespace tk {

/// Register tile layouts: `row` (A operand / accumulator) and `col` (B operand).
struct row {};
struct col {};

template <typename L>
concept rt_layout = tk::is_same_v<L, row> || tk::is_same_v<L, col>;

template <rt_layout L> using transpose_layout = tk::conditional_t<tk::is_same_v<L, row>, col, row>;

/// Position of one element inside a 16x16 subtile.
struct rc {
    int r, c;
};

/// The single source of truth for the layout above: lane, register k (0..3), half p (0..1) -> (r, c).
template <rt_layout L>
__host__ __device__ constexpr rc fragment_pos(int lane, int k, int p) {
    const int g = lane / 4, t = lane % 4;
    const int a = g + 8 * (k & 1);          // the index owned by a group (its "row" in the row layout)
    const int b = 2 * t + p + 8 * (k >> 1);  // the index spread over a group's 4 lanes, 2 per lane
    if constexpr (tk::is_same_v<L, row>) return {a, b};
    else return {b, a};
}

}  // namespace tk
