// The order in which blocks walk the tiles of an output matrix: grouped so that tiles computed at the
// same time share their inputs in L2.
//
// A GEMM's C is cut into rows x cols tiles; tile (r, c) reads row-panel r of A and column-panel c of B.
// The ~132 tiles in progress at any moment read their panels from L2 at about the same time, so the
// fewer distinct panels they need, the more each fetch from DRAM is reused. 8192^2 in 128 x 256 tiles
// is a 64 x 32 grid: walking row by row, 132 tiles touch 5 row-panels of A and all 32 column-panels of
// B; walking down `group` tile rows before moving one column right (a "grouped" order), group = 16
// touches 16 of A and 9 of B -- about half the bytes.
//
//   const tile_order order{tiles_m, tiles_n, 16};
//   for (int i = first; i < order.count(); i += step) { const coord t = order(i); ... }
//
// group = 1 is plain row-major order; the last group is shorter when group does not divide rows.
// Everything is constexpr, so the order can be checked at compile time (tests/, and the notebook).
#pragma once

#include "gl.cuh"

namespace tk {

struct tile_order {
    int rows, cols, group;  // tiles along M, tiles along N, tile rows walked together

    __host__ __device__ constexpr int count() const { return rows * cols; }

    /// Tile number i (0 .. count()-1) of the walk.
    __host__ __device__ constexpr coord operator()(int i) const {
        const int per_group = group * cols;         // tiles in one band of `group` tile rows
        const int first = (i / per_group) * group;  // the band's first tile row
        const int height = rows - first < group ? rows - first : group;
        const int j = i % per_group;                // position inside the band: down, then right
        return {first + j % height, j / height};
    }
};

}  // namespace tk
