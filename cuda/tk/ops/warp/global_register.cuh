// Global memory <-> registers, directly: load(tile, gl, coord), store(gl, tile, coord).
//
// Each lane reads or writes exactly the elements its fragment holds (layout.cuh; walked by for_each_pair,
// rt.cuh). For a row tile the
// 4 lanes of a group touch 16 (bf16) or 32 (fp32) contiguous bytes of one row: fine for an epilogue
// or a test, but the fast path for operands goes through shared memory (global_shared.cuh, then
// shared_register.cuh). The element types may differ: values are converted on the way.
#pragma once

#include "../../types/types.cuh"

namespace tk {

/// dst = tile `t` (in units of dst's size) of src.
template <element T, int R, int C, rt_layout L, typename U>
__device__ inline void load(rt<T, R, C, L>& dst, const gl<U>& src, coord t) {
    const U* base = src.template tile_ptr<R, C>(t);
    for_each_pair(dst, [&](pair_t<T>& x, rc at, rc e0, rc e1) {
        const U* p0 = base + size_t(at.r + e0.r) * src.stride + at.c + e0.c;
        if constexpr (tk::is_same_v<L, row>) {  // the pair is contiguous: one access
            x = from_float2<T>(to_float2(*reinterpret_cast<const pair_t<tk::remove_cv_t<U>>*>(p0)));
        } else {
            x = make_pair<T>(*p0, *(base + size_t(at.r + e1.r) * src.stride + at.c + e1.c));
        }
    });
}

/// Tile `t` (in units of src's size) of dst = src.
template <typename U, element T, int R, int C, rt_layout L>
__device__ inline void store(const gl<U>& dst, const rt<T, R, C, L>& src, coord t) {
    static_assert(!tk::is_const_v<U>, "store: the global layout is read-only (gl<const T>)");
    U* base = dst.template tile_ptr<R, C>(t);
    for_each_pair(src, [&](const pair_t<T>& pair, rc at, rc e0, rc e1) {
        U* p0 = base + size_t(at.r + e0.r) * dst.stride + at.c + e0.c;
        const float2 x = to_float2(pair);
        if constexpr (tk::is_same_v<L, row>) {
            *reinterpret_cast<pair_t<U>*>(p0) = from_float2<U>(x);
        } else {
            *p0 = from_float<U>(x.x);
            *(base + size_t(at.r + e1.r) * dst.stride + at.c + e1.c) = from_float<U>(x.y);
        }
    });
}

/// dst = src[0 .. N): each lane reads the entries its layout holds.
template <element T, int N, rv_layout VL, typename U>
__device__ inline void load(rv<T, N, VL>& dst, const U* src) {
    const int lane = laneid();
#pragma unroll
    for (int b = 0; b < N / TILE; b++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if constexpr (tk::is_same_v<VL, lane_g>) {
                dst.data[b][h] = from_float<T>(to_float(src[vector_index<VL>(lane, b, h)]));
            } else {
                dst.data[b][h] = make_pair<T>(src[vector_index<VL>(lane, b, h, 0)], src[vector_index<VL>(lane, b, h, 1)]);
            }
        }
    }
}

/// dst[0 .. N) = src. Every entry is held by 4 (lane_g) or 8 (lane_t) lanes; one of them writes it.
/// Entries at index `length` or beyond are not written (the ragged end of a sequence).
template <typename U, element T, int N, rv_layout VL>
__device__ inline void store(U* dst, const rv<T, N, VL>& src, int length = N) {
    const int lane = laneid();
    const bool writer = tk::is_same_v<VL, lane_g> ? lane % 4 == 0 : lane < 4;
    if (!writer) return;
#pragma unroll
    for (int b = 0; b < N / TILE; b++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if constexpr (tk::is_same_v<VL, lane_g>) {
                const int i = vector_index<VL>(lane, b, h);
                if (i < length) dst[i] = from_float<U>(to_float(src.data[b][h]));
            } else {
                const float2 x = to_float2(src.data[b][h]);
                const int i = vector_index<VL>(lane, b, h, 0);
                if (i < length) dst[i] = from_float<U>(x.x);
                if (i + 1 < length) dst[i + 1] = from_float<U>(x.y);
            }
        }
    }
}

}  // namespace tk
