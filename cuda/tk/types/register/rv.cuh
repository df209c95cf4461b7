// Register vectors: one value per row (or per column) of a register tile, laid out so that each lane
// holds exactly the entries it needs to combine with its own tile elements -- no shuffles on use.
//
// Two layouts follow from the fragment layout (layout.cuh):
//   lane_g -- the index owned by a group: entries g and g+8 of each 16-block live in the 4 lanes of
//             group g (so each lane holds 2 values per 16, replicated over t). A row tile's per-row
//             values (max, sum of each row) come out this way.
//   lane_t -- the index spread over a group: entries 2t, 2t+1, 2t+8, 2t+9 live in lane t of every
//             group (2 pairs per 16, replicated over g). A row tile's per-column values come out so.
// For a col tile the roles swap (its rows are spread over t). rt<...>::col_vec / row_vec pick the right
// one; ops static_assert that they match.
#pragma once

#include "../../common/common.cuh"

namespace tk {

struct lane_g {};
struct lane_t {};

template <typename V>
concept rv_layout = tk::is_same_v<V, lane_g> || tk::is_same_v<V, lane_t>;

template <element T, int N, rv_layout VL>
struct rv {
    static_assert(N % TILE == 0, "vector length must be a multiple of 16");
    using dtype = T;
    using layout = VL;
    /// What one storage slot holds: a single value (lane_g) or a pair of neighbours (lane_t).
    using reg_t = tk::conditional_t<tk::is_same_v<VL, lane_g>, T, pair_t<T>>;
    static constexpr int length = N;
    static constexpr int blocks = N / TILE;
    static constexpr int n_regs = blocks * 2;

    /// lane_g: data[b][h] = entry 16b + g + 8h.   lane_t: data[b][q] = entries 16b + 2t + 8q, +1.
    reg_t data[blocks][2];

    /// Flat view for element-wise code; with a constant i it compiles to a plain register.
    __device__ reg_t& reg(int i) { return data[i / 2][i % 2]; }
    __device__ const reg_t& reg(int i) const { return data[i / 2][i % 2]; }
};

/// Which vector entry storage slot (b, h) / pair half p of `lane` holds (see the table above).
template <rv_layout VL>
__host__ __device__ constexpr int vector_index(int lane, int b, int h, int p = 0) {
    if constexpr (tk::is_same_v<VL, lane_g>) return TILE * b + lane / 4 + 8 * h;
    else return TILE * b + 2 * (lane % 4) + p + 8 * h;
}

template <int N, rv_layout VL> using rv_fl = rv<float, N, VL>;
template <int N, rv_layout VL> using rv_bf = rv<bf16, N, VL>;
template <int N, rv_layout VL> using rv_hf = rv<half, N, VL>;

}  // namespace tk
