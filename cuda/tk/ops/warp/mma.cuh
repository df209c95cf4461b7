// Warp-level tensor-core products: d = a * b + c with mma.sync.m16n8k16 (sm_80 and up).
//
//   mma_AB (d, a, b, c): a is M x K (row tile), b is K x N (col tile),   c, d are M x N fp32 row tiles.
//   mma_ABt(d, a, b, c): a is M x K (row tile), b is N x K (row tile): d = a * b^T + c.
//
// One mma.m16n8k16 multiplies a 16x16 A fragment by a 16x8 B fragment. A row subtile IS an A fragment
// (layout.cuh), and an fp32 row subtile is two side-by-side 16x8 C fragments: pairs [0],[1] cover
// columns 0..7, pairs [2],[3] columns 8..15. B wants lane (g, t) to hold k = 2t, 2t+1 and k = 2t+8, 2t+9
// of column n = g: in a col subtile those are pairs [0], [2] (columns 0..7) and [1], [3] (columns 8..15).
// A row subtile of B^T (N x K) holds the same elements in the same pairs -- which is why mma_ABt needs
// no transposition at all, and mma_AB wants its B loaded with ldmatrix.trans.
#pragma once

#include "../../types/types.cuh"

namespace tk {

namespace detail {
/// One m16n8k16 product, fp32 accumulate: {d0, d1} = A * {b0, b1} + {c0, c1}.
template <element16 T>
__device__ inline void mma16816(float2& d0, float2& d1, const pair_t<T> (&a)[4], const pair_t<T>& b0,
                                const pair_t<T>& b1, const float2& c0, const float2& c1) {
    if constexpr (tk::is_same_v<T, bf16>) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
            : "=f"(d0.x), "=f"(d0.y), "=f"(d1.x), "=f"(d1.y)
            : "r"(as_u32<T>(a[0])), "r"(as_u32<T>(a[1])), "r"(as_u32<T>(a[2])), "r"(as_u32<T>(a[3])),
              "r"(as_u32<T>(b0)), "r"(as_u32<T>(b1)), "f"(c0.x), "f"(c0.y), "f"(c1.x), "f"(c1.y));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
            : "=f"(d0.x), "=f"(d0.y), "=f"(d1.x), "=f"(d1.y)
            : "r"(as_u32<T>(a[0])), "r"(as_u32<T>(a[1])), "r"(as_u32<T>(a[2])), "r"(as_u32<T>(a[3])),
              "r"(as_u32<T>(b0)), "r"(as_u32<T>(b1)), "f"(c0.x), "f"(c0.y), "f"(c1.x), "f"(c1.y));
    }
}

/// d = a * B + c, where bsub(j, kk) returns the subtile of B^T-in-storage at (n block j, k block kk).
template <int M, int N, int K, element16 T, typename BSub>
__device__ inline void mma_tiles(rt<float, M, N, row>& d, const rt<T, M, K, row>& a, BSub bsub,
                                 const rt<float, M, N, row>& c) {
#pragma unroll
    for (int i = 0; i < M / TILE; i++) {
#pragma unroll
        for (int j = 0; j < N / TILE; j++) {
#pragma unroll
            for (int kk = 0; kk < K / TILE; kk++) {
                const auto& acc = kk == 0 ? c.tiles[i][j] : d.tiles[i][j];
                const auto& b = bsub(j, kk);
                auto& out = d.tiles[i][j];
                mma16816<T>(out.data[0], out.data[1], a.tiles[i][kk].data, b.data[0], b.data[2],
                            acc.data[0], acc.data[1]);  // output columns 0..7
                mma16816<T>(out.data[2], out.data[3], a.tiles[i][kk].data, b.data[1], b.data[3],
                            acc.data[2], acc.data[3]);  // output columns 8..15
            }
        }
    }
}
}  // namespace detail

/// d = a * b + c.  a: M x K row tile, b: K x N col tile, c and d: M x N fp32 row tiles (d may be c).
template <element16 T, int M, int N, int K>
__device__ inline void mma_AB(rt<float, M, N, row>& d, const rt<T, M, K, row>& a, const rt<T, K, N, col>& b,
                              const rt<float, M, N, row>& c) {
    detail::mma_tiles(d, a, [&](int j, int kk) -> const auto& { return b.tiles[kk][j]; }, c);
}

/// d = a * b^T + c.  a: M x K row tile, b: N x K row tile, c and d: M x N fp32 row tiles (d may be c).
template <element16 T, int M, int N, int K>
__device__ inline void mma_ABt(rt<float, M, N, row>& d, const rt<T, M, K, row>& a, const rt<T, N, K, row>& b,
                               const rt<float, M, N, row>& c) {
    detail::mma_tiles(d, a, [&](int j, int kk) -> const auto& { return b.tiles[j][kk]; }, c);
}

}  // namespace tk
