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
//
// Either operand may also be a SHARED tile: mma_ABt(s, q, k_smem, s) streams K's subtiles from shared
// memory (one ldmatrix.x4 each, used at once) instead of holding all of K in registers. The loop runs
// over K in 16-deep slices; in each slice the A subtiles are fetched once and reused across all of
// the slice's B subtiles, and each B subtile serves every row block of A -- so a warp that owns 32
// rows reads each K subtile once for 2 x 2 = 4 mma instructions. That ratio (mma per shared-memory
// byte) is what keeps a warp-level kernel off the shared-memory bandwidth limit.
#pragma once

#include "../../types/types.cuh"
#include "shared_register.cuh"

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
/// The same product, K slice by K slice: asub(i, kk) returns an A subtile, bsub(j, kk) a B subtile in
/// mma order (pairs [0] [1] for output columns 0..7, [2] [3] for 8..15: load_subtile_mma_b), each
/// fetched once per slice (from shared memory, or copied from registers).
template <int M, int N, int K, element16 T, typename ASub, typename BSub>
__device__ inline void mma_slices(rt<float, M, N, row>& d, ASub asub, BSub bsub, const rt<float, M, N, row>& c) {
#pragma unroll
    for (int kk = 0; kk < K / TILE; kk++) {
        rt_base<T, row> a[M / TILE];
#pragma unroll
        for (int i = 0; i < M / TILE; i++) a[i] = asub(i, kk);
#pragma unroll
        for (int j = 0; j < N / TILE; j++) {
            const auto b = bsub(j, kk);
#pragma unroll
            for (int i = 0; i < M / TILE; i++) {
                const auto& acc = kk == 0 ? c.tiles[i][j] : d.tiles[i][j];
                auto& out = d.tiles[i][j];
                mma16816<T>(out.data[0], out.data[1], a[i].data, b.data[0], b.data[1], acc.data[0], acc.data[1]);
                mma16816<T>(out.data[2], out.data[3], a[i].data, b.data[2], b.data[3], acc.data[2], acc.data[3]);
            }
        }
    }
}

/// Subtile (i, kk) of an A operand: from a row register tile, or loaded from a shared tile.
template <typename A>
__device__ inline auto a_subtile(const A& a, int i, int kk) {
    if constexpr (register_tile<A>) return a.tiles[i][kk];
    else return load_subtile<row>(a, TILE * i, TILE * kk);
}

/// A register subtile of B put in mma order (see mma_slices).
template <element16 T, rt_layout L>
__device__ inline rt_base<T, L> mma_order(const rt_base<T, L>& b) {
    return {{b.data[0], b.data[2], b.data[1], b.data[3]}};
}
}  // namespace detail

/// An mma operand: a register tile or a shared tile of 16-bit elements.
template <typename X>
concept mma_operand = (register_tile<X> || shared_tile<X>) && element16<typename X::dtype>;

/// d = a * b + c with a shared operand: a is M x K (row register tile or shared tile), b is K x N
/// (col register tile or shared tile, read with ldmatrix.trans).
template <int M, int N, mma_operand A, mma_operand B>
    requires(shared_tile<A> || shared_tile<B>)
__device__ inline void mma_AB(rt<float, M, N, row>& d, const A& a, const B& b, const rt<float, M, N, row>& c) {
    using T = typename A::dtype;
    static_assert(tk::is_same_v<T, typename B::dtype>, "mma_AB: A and B hold different element types");
    static_assert(A::rows == M && B::cols == N && A::cols == B::rows, "mma_AB: shapes do not chain (M x K, K x N)");
    if constexpr (register_tile<A>) static_assert(A::is_row, "mma_AB: a register A must be a row tile");
    if constexpr (register_tile<B>) static_assert(!B::is_row, "mma_AB: a register B must be a col tile");
    auto bsub = [&](int j, int kk) {
        if constexpr (register_tile<B>) return detail::mma_order(b.tiles[kk][j]);
        else return detail::load_subtile_mma_b<col>(b, TILE * kk, TILE * j);
    };
    detail::mma_slices<M, N, A::cols, T>(d, [&](int i, int kk) { return detail::a_subtile(a, i, kk); }, bsub, c);
}

/// d = a * b^T + c with a shared operand: a is M x K, b is N x K (row register tile or shared tile).
template <int M, int N, mma_operand A, mma_operand B>
    requires(shared_tile<A> || shared_tile<B>)
__device__ inline void mma_ABt(rt<float, M, N, row>& d, const A& a, const B& b, const rt<float, M, N, row>& c) {
    using T = typename A::dtype;
    static_assert(tk::is_same_v<T, typename B::dtype>, "mma_ABt: A and B hold different element types");
    static_assert(A::rows == M && B::rows == N && A::cols == B::cols, "mma_ABt: shapes do not chain (M x K, N x K)");
    if constexpr (register_tile<A>) static_assert(A::is_row, "mma_ABt: a register A must be a row tile");
    if constexpr (register_tile<B>) static_assert(B::is_row, "mma_ABt: a register B must be a row tile");
    auto bsub = [&](int j, int kk) {
        if constexpr (register_tile<B>) return detail::mma_order(b.tiles[j][kk]);
        else return detail::load_subtile_mma_b<row>(b, TILE * j, TILE * kk);
    };
    detail::mma_slices<M, N, A::cols, T>(d, [&](int i, int kk) { return detail::a_subtile(a, i, kk); }, bsub, c);
}

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
