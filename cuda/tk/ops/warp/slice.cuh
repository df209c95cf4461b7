// A slice of a register tile: some of its columns, as a tile of their own.
//
// An epilogue that leaves through shared memory in pieces (a 64 x 256 accumulator sent out as four
// 64 x 64 tiles, so the staging buffer is a quarter of the size) needs the accumulator's columns
// [jW, jW + W). A register tile is a grid of 16 x 16 subtiles (rt.cuh), so those columns are just
// subtiles j*W/16 .. of every subtile row: the "copy" below is register renaming once j is a constant
// (call it inside a fully unrolled loop), not a single instruction.
#pragma once

#include "../../types/register/rt.cuh"

namespace tk {

/// Columns [j*W, j*W + W) of t (W a multiple of 16 dividing t's columns).
template <int W, element T, int R, int C, rt_layout L>
__device__ inline rt<T, R, W, L> columns(const rt<T, R, C, L>& t, int j) {
    static_assert(W % TILE == 0 && C % W == 0, "columns<W>: W must be a multiple of 16 that divides the tile");
    static_assert(tk::is_same_v<L, row>, "columns<W> slices row-layout tiles (a col tile's columns are rows)");
    rt<T, R, W, L> out;
#pragma unroll
    for (int i = 0; i < R / TILE; ++i) {
#pragma unroll
        for (int w = 0; w < W / TILE; ++w) out.tiles[i][w] = t.tiles[i][j * (W / TILE) + w];
    }
    return out;
}

}  // namespace tk
