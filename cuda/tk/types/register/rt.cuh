// Register tiles: an R x C matrix spread over the 32 lanes of one warp.
//
// A tile is a grid of (R/16) x (C/16) subtiles of 16x16; each lane holds 4 pairs of every subtile, in
// the fragment layout of layout.cuh. So a bf16 64x64 tile costs each lane 16 subtiles x 4 registers =
// 64 registers, an fp32 one 128: tile sizes are a register budget.
#pragma once

#include "../../common/common.cuh"
#include "layout.cuh"
#include "rv.cuh"

namespace tk {

/// One 16x16 subtile: 4 pairs per lane.
template <element T, rt_layout L>
struct rt_base {
    using dtype = T;
    using layout = L;
    pair_t<T> data[4];
};

template <element T, int R, int C, rt_layout L = row>
struct rt {
    static_assert(R % TILE == 0 && C % TILE == 0, "register tile sides must be multiples of 16");
    using dtype = T;
    using layout = L;
    using reg_t = pair_t<T>;
    static constexpr int rows = R, cols = C;
    static constexpr int height = R / TILE, width = C / TILE;  // in subtiles
    static constexpr int n_regs = height * width * 4;          // pairs per lane

    rt_base<T, L> tiles[height][width];

    static constexpr bool is_row = tk::is_same_v<L, row>;
    /// One value per row (length R) -- e.g. a row max; one value per column (length C).
    using col_vec = rv<T, R, tk::conditional_t<is_row, lane_g, lane_t>>;
    using row_vec = rv<T, C, tk::conditional_t<is_row, lane_t, lane_g>>;

    /// Flat view for element-wise code; with a constant i it compiles to a plain register.
    __device__ reg_t& reg(int i) { return tiles[i / (4 * width)][(i / 4) % width].data[i % 4]; }
    __device__ const reg_t& reg(int i) const { return tiles[i / (4 * width)][(i / 4) % width].data[i % 4]; }
};

template <int R, int C, rt_layout L = row> using rt_bf = rt<bf16, R, C, L>;
template <int R, int C, rt_layout L = row> using rt_hf = rt<half, R, C, L>;
template <int R, int C, rt_layout L = row> using rt_fl = rt<float, R, C, L>;

/// Short names for a tile's vectors: col_vec<S> holds one value per ROW of S (a column of values: the
/// row max, the row sum); row_vec<S> one value per COLUMN (a row of values: a bias).
template <typename RT> using col_vec = typename RT::col_vec;
template <typename RT> using row_vec = typename RT::row_vec;

// ---- traits the ops use to check their arguments at compile time ------------------------------------
template <typename X> inline constexpr bool is_rt = false;
template <element T, int R, int C, rt_layout L> inline constexpr bool is_rt<rt<T, R, C, L>> = true;
template <typename X> inline constexpr bool is_rv = false;
template <element T, int N, rv_layout VL> inline constexpr bool is_rv<rv<T, N, VL>> = true;

template <typename X> concept register_tile = is_rt<tk::remove_cvref_t<X>>;
template <typename X> concept register_vector = is_rv<tk::remove_cvref_t<X>>;
/// Anything element-wise ops walk through: a register tile or a register vector.
template <typename X> concept register_object = register_tile<X> || register_vector<X>;

/// Walk this lane's share of a register tile, register by register: f(pair, at, e0, e1) for every pair the
/// lane holds, where `at` is the first element (row, column) of the pair's 16x16 subtile in the tile and
/// e0, e1 the positions of the pair's two elements inside that subtile (fragment_pos, layout.cuh). In a row
/// tile e1 is e0's right neighbour, so the pair is one access of two contiguous elements; in a col tile it
/// is the element below. Every op that moves a tile element by element (global and shared memory, masks,
/// a warpgroup's epilogue) walks through here. Why `at` apart: index as `at.r + e0.r`, `at.c + e0.c` right
/// where the address is formed, and the subtile's constant offset folds into the load's or store's
/// immediate (summed into one int first, it costs an address computation per access).
template <register_tile RT, typename F>
__device__ inline void for_each_pair(RT& t, F&& f) {
    using L = typename tk::remove_cvref_t<RT>::layout;
    constexpr int H = tk::remove_cvref_t<RT>::height, W = tk::remove_cvref_t<RT>::width;
    const int lane = laneid();
#pragma unroll
    for (int i = 0; i < H; i++) {
#pragma unroll
        for (int j = 0; j < W; j++) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const rc e0 = fragment_pos<L>(lane, k, 0), e1 = fragment_pos<L>(lane, k, 1);
                f(t.tiles[i][j].data[k], rc{TILE * i, TILE * j}, e0, e1);
            }
        }
    }
}

/// Same shape and layout (element types may differ): element-wise ops pair registers one to one.
template <typename A, typename B> inline constexpr bool same_shape = false;
template <element T, element U, int R, int C, rt_layout L>
inline constexpr bool same_shape<rt<T, R, C, L>, rt<U, R, C, L>> = true;
template <element T, element U, int N, rv_layout VL>
inline constexpr bool same_shape<rv<T, N, VL>, rv<U, N, VL>> = true;

}  // namespace tk
