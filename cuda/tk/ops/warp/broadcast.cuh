// Row and column broadcasts: combine a tile with one value per row, or one value per column.
//
//   mul_row(o, o, scale)  -- o[r][c] *= scale[r]   (rescaling the output in online softmax)
//   sub_row(s, s, m)      -- s[r][c] -= m[r]       (subtracting the row maximum)
//   add_col(y, x, bias)   -- y[r][c] = x[r][c] + bias[c]
//   div_row(o, o, l)      -- o[r][c] /= l[r]: one reciprocal per row (rcp.approx), then multiplies --
//                            a divide per element would cost a dozen instructions each
//
// The vector's layout (rv.cuh) puts in each lane exactly the entries for the rows (or columns) its
// tile registers hold, so a broadcast is register-local. *_row takes a length-R vector (tile::col_vec),
// *_col a length-C vector (tile::row_vec).
#pragma once

#include "maps.cuh"

namespace tk {

namespace detail {
template <bool Rows, register_tile D, register_tile A, register_vector V, typename F>
    requires same_shape<D, A>
__device__ inline void broadcast(D& d, const A& a, const V& v, F f) {
    // The vector runs along the axis a group owns (lane_g) when it indexes the row tile's rows or the
    // col tile's columns; otherwise along the axis spread over a group's lanes (lane_t).
    constexpr bool along_g = (Rows == D::is_row);
    static_assert(tk::is_same_v<typename V::layout, tk::conditional_t<along_g, lane_g, lane_t>>,
                  "vector layout does not match: use the tile's col_vec for *_row ops, row_vec for *_col ops");
    static_assert(V::length == (Rows ? D::rows : D::cols), "vector length does not match the tile");
    using T = typename D::dtype;
#pragma unroll
    for (int i = 0; i < D::height; i++) {
#pragma unroll
        for (int j = 0; j < D::width; j++) {
            const int b = Rows ? i : j;  // which 16-block of the vector
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 x = to_float2(a.tiles[i][j].data[k]);
                float2 s;
                if constexpr (along_g) s.x = s.y = to_float(v.data[b][k & 1]);  // quadrant row half
                else s = to_float2(v.data[b][k >> 1]);                           // quadrant column half
                d.tiles[i][j].data[k] = from_float2<T>(make_float2(f(x.x, s.x), f(x.y, s.y)));
            }
        }
    }
}
}  // namespace detail

#define TK_BROADCAST(name, rows, fn)                                                                \
    template <register_tile D, register_tile A, register_vector V>                                  \
    __device__ inline void name(D& d, const A& a, const V& v) { detail::broadcast<rows>(d, a, v, op::fn{}); }
TK_BROADCAST(add_row, true, add)
TK_BROADCAST(sub_row, true, sub)
TK_BROADCAST(mul_row, true, mul)
TK_BROADCAST(add_col, false, add)
TK_BROADCAST(sub_col, false, sub)
TK_BROADCAST(mul_col, false, mul)
#undef TK_BROADCAST

/// d[r][c] = f(a[r][c], v[r]) (map_row) or f(a[r][c], v[c]) (map_col) for any maths f(float, float):
/// e.g. the softmax numerator in one pass, map_row(p, s, m, [=](float x, float m) { return fast::exp2(x * c - m); }).
template <register_tile D, register_tile A, register_vector V, typename F>
__device__ inline void map_row(D& d, const A& a, const V& v, F f) { detail::broadcast<true>(d, a, v, f); }
template <register_tile D, register_tile A, register_vector V, typename F>
__device__ inline void map_col(D& d, const A& a, const V& v, F f) { detail::broadcast<false>(d, a, v, f); }

/// d = a / v per row (div_row) or per column (div_col): v's reciprocals once, then multiplies.
template <register_tile D, register_tile A, register_vector V>
__device__ inline void div_row(D& d, const A& a, const V& v) {
    V inv;
    map(inv, v, op::rcp{});
    mul_row(d, a, inv);
}
template <register_tile D, register_tile A, register_vector V>
__device__ inline void div_col(D& d, const A& a, const V& v) {
    V inv;
    map(inv, v, op::rcp{});
    mul_col(d, a, inv);
}

}  // namespace tk
