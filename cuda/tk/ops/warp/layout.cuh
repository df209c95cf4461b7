// Changing layout in registers: swap_layout (same matrix, row <-> col storage) and transpose.
//
// A col subtile stores the transposed quadrants of a row subtile: quadrant (row half a, column half b)
// sits in pair [a + 2b] of a row tile and in pair [2a + b] of a col tile, and inside it lane (g, t) must
// trade its (g, 2t..2t+1) for (2t..2t+1, g). For 16-bit types one instruction does that per quadrant:
// movmatrix.m8n8.trans (sm_75+), an 8x8 transpose across the warp. fp32 pairs take shuffles.
//
// transpose(d, a) between a row R x C tile and a col C x R tile costs NOTHING: both store the same
// registers (subtile (i, j) of one is subtile (j, i) of the other). Transposing within one layout is a
// swap_layout plus that free step.
#pragma once

#include "../../types/types.cuh"

namespace tk {

namespace detail {
/// The 8x8 transpose of one quadrant across the warp.
template <element T>
__device__ inline pair_t<T> transpose_quadrant(const pair_t<T>& x) {
    if constexpr (sizeof(T) == 2) {
        pair_t<T> y;
        asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(as_u32<T>(y)) : "r"(as_u32<T>(x)));
        return y;
    } else {
        // Lane (g, t) wants elements (2t, g) and (2t+1, g) of the quadrant; (a, b) sits in lane 4a + b/2,
        // half b%2. Both halves of the source are fetched and the right one kept.
        const int lane = laneid(), g = lane / 4, t = lane % 4;
        float out[2];
#pragma unroll
        for (int p = 0; p < 2; p++) {
            const int src = 4 * (2 * t + p) + g / 2;
            const float lo = __shfl_sync(0xffffffffu, x.x, src), hi = __shfl_sync(0xffffffffu, x.y, src);
            out[p] = (g & 1) ? hi : lo;
        }
        return make_float2(out[0], out[1]);
    }
}
}  // namespace detail

/// d = a as a matrix, stored in the other layout (row <-> col).
template <element T, int R, int C, rt_layout L>
__device__ inline void swap_layout(rt<T, R, C, transpose_layout<L>>& d, const rt<T, R, C, L>& a) {
#pragma unroll
    for (int i = 0; i < R / TILE; i++) {
#pragma unroll
        for (int j = 0; j < C / TILE; j++) {
            pair_t<T> tmp[4];  // d may alias a's registers only through copies, so gather first
#pragma unroll
            for (int k = 0; k < 4; k++) tmp[k] = detail::transpose_quadrant<T>(a.tiles[i][j].data[2 * (k & 1) + (k >> 1)]);
#pragma unroll
            for (int k = 0; k < 4; k++) d.tiles[i][j].data[k] = tmp[k];
        }
    }
}

/// d = a^T in the other layout: free (the same registers, renamed).
template <element T, int R, int C, rt_layout L>
__device__ inline void transpose(rt<T, C, R, transpose_layout<L>>& d, const rt<T, R, C, L>& a) {
#pragma unroll
    for (int i = 0; i < R / TILE; i++)
#pragma unroll
        for (int j = 0; j < C / TILE; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) d.tiles[j][i].data[k] = a.tiles[i][j].data[k];
}

/// d = a^T in the same layout: data moves across lanes (swap_layout), then the free rename.
template <element T, int R, int C, rt_layout L>
__device__ inline void transpose(rt<T, C, R, L>& d, const rt<T, R, C, L>& a) {
    rt<T, R, C, transpose_layout<L>> swapped;
    swap_layout(swapped, a);
    transpose(d, swapped);
}

}  // namespace tk
