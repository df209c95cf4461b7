// Writing a warpgroup's 64 x N accumulator out: each warp writes its own 16 rows.
//
// After mma_async_wait(), warp w of the warpgroup holds rows 16w..16w+15 of the 64 x N product as an
// rt<float, 16, N>. These helpers round it to T on the way out (register-tile layout, layout.cuh).
#pragma once

#include "../../types/global/gl.cuh"
#include "../../types/register/rt.cuh"
#include "../../types/shared/st.cuh"
#include "../warp/convert.cuh"
#include "../warp/shared_register.cuh"
#include "scope.cuh"

namespace tk::warpgroup {

/// Store the warpgroup's tile to 64 x N tile t of a global matrix (coord counted in 64 x N tiles).
template <typename T, int N>
__device__ inline void store(const gl<T>& dst, const rt<float, 16, N>& d, coord t) {
    using U = typename gl<T>::dtype;
    const int row0 = t.r * 64 + 16 * warp(), col0 = t.c * N;
    for_each_pair(d, [&](const float2& pair, rc at, rc e, rc) {
        *reinterpret_cast<pair_t<U>*>(&dst(row0 + at.r + e.r, col0 + at.c + e.c)) = from_float2<U>(pair);
    });
}

/// Store the warpgroup's tile into a 64 x N shared tile (any swizzle): e.g. to send it out with TMA
/// (then fence_proxy_async(), sync the warpgroup, and let one thread call tma::store_async).
/// 16-bit tiles are rounded in registers and written with stmatrix (16 bytes per lane and row, 4 rows
/// of 8x8 at once), not one 4-byte pair per store.
template <shared_tile ST, int N>
__device__ inline void store(ST& dst, const rt<float, 16, N>& d) {
    static_assert(ST::rows == 64 && ST::cols == N, "the shared tile must be 64 x N");
    using U = typename ST::dtype;
    if constexpr (sizeof(U) == 2) {
        rt<U, 16, N> rounded;
        copy(rounded, d);
        tk::store(dst, rounded, {warp(), 0});  // this warp's 16 rows
    } else {
        const int row0 = 16 * warp();
        for_each_pair(d, [&](const float2& pair, rc at, rc e, rc) {
            *reinterpret_cast<float2*>(&dst(row0 + at.r + e.r, at.c + e.c)) = pair;
        });
    }
}

}  // namespace tk::warpgroup
