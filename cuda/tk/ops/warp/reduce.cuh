// Row and column reductions: v[r] = max/sum over row r of a tile (or over each column).
//
// Take a row tile and a row reduction. Row g of a subtile lives in the 4 lanes of group g, each lane
// holding 4 of its 16 values (2 pairs), in every subtile along the row. So: (1) each lane folds its own
// values across the row's subtiles, (2) the 4 lanes of the group combine with two butterfly shuffles
// (xor 1, xor 2). After that every lane of the group has the result: a lane_g vector, for free.
// A column reduction folds the two row halves instead, then shuffles across the 8 groups (xor 4, 8, 16)
// and yields a lane_t vector. A col tile swaps the two cases.
//
// The 3-argument forms accumulate: row_max(v, a, prev) is v[r] = max(prev[r], max of row r of a).
//
// Two knobs for the hot loop of attention, where a row of 176 scores is folded every block:
//   row_max<4>(v, a): a lane keeps 4 partial results and combines them at the end. One chain of 44
//     dependent FMNMX becomes 4 chains of 11 the scheduler can interleave (the instructions are the same;
//     the latency on the critical path is a quarter).
//   row_sum_lanes(v, a): each lane's share of the row sum, the two shuffles left out. A running sum can stay
//     in lane shares across blocks (the rescale factor is the same in the group's 4 lanes, so
//     a*(x0+x1+x2+x3) = a*x0 + ... + a*x3) and be finished once, at the end: finish_row_sum(v).
#pragma once

#include "maps.cuh"

namespace tk {

namespace detail {
template <bool Rows, int Ways, bool AcrossLanes, register_vector V, register_tile A, typename F>
__device__ inline void reduce(V& v, const A& a, F f, const V* prev) {
    static_assert(Ways == 1 || Ways == 2 || Ways == 4, "Ways: 1, 2 or 4 partial results per lane");
    constexpr bool along_g = (Rows == A::is_row);  // result indexed by the group-owned axis
    static_assert(tk::is_same_v<typename V::layout, tk::conditional_t<along_g, lane_g, lane_t>>,
                  "vector layout does not match: row_* ops give the tile's col_vec, col_* ops its row_vec");
    static_assert(V::length == (Rows ? A::rows : A::cols), "vector length does not match the tile");
    constexpr int n_blocks = Rows ? A::height : A::width;  // 16-blocks of the result
    constexpr int n_other = Rows ? A::width : A::height;   // subtiles folded into each block
    using T = typename V::dtype;
#pragma unroll
    for (int b = 0; b < n_blocks; b++) {
        const auto& first = Rows ? a.tiles[b][0] : a.tiles[0][b];
        if constexpr (along_g) {
            // part[h][w]: entries g (h = 0) and g+8 (h = 1) of this block, partial result w. The values of a
            // row are dealt to the Ways partials in turn, so each chain is 1/Ways of the row long.
            float part[2][Ways];
            int seen[2] = {0, 0};  // values of each row folded so far (known at compile time once unrolled)
            auto fold = [&](int h, float x) {
                float& p = part[h][seen[h] % Ways];
                p = seen[h] < Ways ? x : f(p, x);  // the first Ways values start the partials
                ++seen[h];
            };
#pragma unroll
            for (int o = 0; o < n_other; o++) {
                const auto& sub = Rows ? a.tiles[b][o] : a.tiles[o][b];
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const float2 x = to_float2(sub.data[k]);
                    fold(k & 1, x.x);
                    fold(k & 1, x.y);
                }
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float acc = part[h][0];
#pragma unroll
                for (int w = 1; w < Ways; w++) acc = f(acc, part[h][w]);
                if constexpr (AcrossLanes) {
                    acc = f(acc, __shfl_xor_sync(0xffffffffu, acc, 1));  // lanes t and t^1
                    acc = f(acc, __shfl_xor_sync(0xffffffffu, acc, 2));  // lanes t and t^2
                }
                if (prev) acc = f(acc, to_float(prev->data[b][h]));
                v.data[b][h] = from_float<T>(acc);
            }
        } else {
            static_assert(Ways == 1 && AcrossLanes, "column reductions fold one chain across all lanes");
            float2 acc[2];  // entry pairs 2t(+1) and 2t+8(+1) of this block
#pragma unroll
            for (int q = 0; q < 2; q++) {
                const float2 x = to_float2(first.data[2 * q]), y = to_float2(first.data[2 * q + 1]);
                acc[q] = make_float2(f(x.x, y.x), f(x.y, y.y));  // the quadrant's two row halves
            }
#pragma unroll
            for (int o = 1; o < n_other; o++) {
                const auto& sub = Rows ? a.tiles[b][o] : a.tiles[o][b];
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const float2 x = to_float2(sub.data[k]);
                    acc[k >> 1] = make_float2(f(acc[k >> 1].x, x.x), f(acc[k >> 1].y, x.y));
                }
            }
#pragma unroll
            for (int q = 0; q < 2; q++) {
#pragma unroll
                for (int m = 4; m < 32; m *= 2) {  // across the 8 groups
                    acc[q].x = f(acc[q].x, __shfl_xor_sync(0xffffffffu, acc[q].x, m));
                    acc[q].y = f(acc[q].y, __shfl_xor_sync(0xffffffffu, acc[q].y, m));
                }
                if (prev) {
                    const float2 p = to_float2(prev->data[b][q]);
                    acc[q] = make_float2(f(acc[q].x, p.x), f(acc[q].y, p.y));
                }
                v.data[b][q] = from_float2<T>(acc[q]);
            }
        }
    }
}
}  // namespace detail

#define TK_REDUCE(name, rows, fn)                                                                   \
    template <int Ways = 1, register_vector V, register_tile A>                                     \
    __device__ inline void name(V& v, const A& a) {                                                 \
        detail::reduce<rows, Ways, true>(v, a, op::fn{}, (const V*)nullptr);                        \
    }                                                                                               \
    template <int Ways = 1, register_vector V, register_tile A>                                     \
    __device__ inline void name(V& v, const A& a, const V& prev) {                                  \
        detail::reduce<rows, Ways, true>(v, a, op::fn{}, &prev);                                    \
    }
TK_REDUCE(row_max, true, max)
TK_REDUCE(row_min, true, min)
TK_REDUCE(row_sum, true, add)
TK_REDUCE(col_max, false, max)
TK_REDUCE(col_min, false, min)
TK_REDUCE(col_sum, false, add)
#undef TK_REDUCE

/// Each lane's share of the sum of each row of a (no shuffles): v is unfinished until finish_row_sum(v).
template <int Ways = 1, register_vector V, register_tile A>
__device__ inline void row_sum_lanes(V& v, const A& a) {
    detail::reduce<true, Ways, false>(v, a, op::add{}, (const V*)nullptr);
}

/// The row sums whose lane shares v holds (row_sum_lanes), finished: the 4 lanes of each group add theirs.
template <register_vector V>
__device__ inline void finish_row_sum(V& v) {
    static_assert(tk::is_same_v<typename V::layout, lane_g>, "lane shares are kept by a row tile's col_vec");
#pragma unroll
    for (int i = 0; i < V::n_regs; i++) {
        float x = to_float(v.reg(i));
        x += __shfl_xor_sync(0xffffffffu, x, 1);
        x += __shfl_xor_sync(0xffffffffu, x, 2);
        v.reg(i) = from_float<typename V::dtype>(x);
    }
}

/// Does pred hold for some entry of v, in any lane of the warp? The same answer in every lane (a warp
/// vote), so it can steer a branch without divergence: e.g. skip rescaling the output when no row's
/// maximum changed, `if (warp_any(a, [](float x) { return x != 1.0f; })) mul_row(o, o, a);`.
template <register_object V, typename Pred>
__device__ inline bool warp_any(const V& v, Pred pred) {
    bool mine = false;
#pragma unroll
    for (int i = 0; i < V::n_regs; i++) {
        if constexpr (tk::is_same_v<typename V::reg_t, typename V::dtype>) {
            mine |= pred(to_float(v.reg(i)));
        } else {
            const float2 x = to_float2(v.reg(i));
            mine |= pred(x.x) || pred(x.y);
        }
    }
    return __any_sync(0xffffffffu, mine);
}

}  // namespace tk
