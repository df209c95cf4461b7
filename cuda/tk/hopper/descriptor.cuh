// wgmma shared-memory matrix descriptors: how the tensor core finds an operand tile in shared memory.
//
// A descriptor is 64 bits: start address, two strides and the swizzle mode (addresses and strides in
// 16-byte units). The tensor core reads the operand as *core matrices* of 8 rows x 16 bytes; the two
// strides say where the next core matrix is along each dimension:
//   K-major (the tile's rows are M or N, its columns K; A as stored row-major, B as N x K):
//     swizzled:    rows 8 apart -> SBO = 8 x span; within the 16-deep K slice the 16-byte chunks are
//                  adjacent inside one swizzled row, so LBO is unused (1 by convention).
//     interleaved: SBO = 128 (next 8 rows), LBO = the panel stride (next 8 columns of K).
//   MN-major (the tile's rows are K, its columns M or N; B as stored row-major K x N):
//     swizzled:    SBO = 8 x span (next 8 rows of K), LBO = panel stride (next span of M/N columns).
//     interleaved: LBO = 128 (next 8 rows of K), SBO = the panel stride (next 8 columns).
// These are exactly the strides of st<>'s panel layout (st.cuh), so a descriptor is computed from the
// tile type alone; slice k (K = 16k .. 16k+15) moves only the start address, by a constant: the
// descriptor of slice k is the tile's descriptor plus (offset of the slice) / 16, one add.
// Swizzle codes (bits 62-63): 0 none, 1 = 128B, 2 = 64B, 3 = 32B. The base-offset field stays 0 because
// swizzled tiles start on a 1024-byte boundary.
#pragma once

#include "../types/shared/st.cuh"
#include "interleave.cuh"

namespace tk::wgmma {

/// Which dimension of a tile runs along K: its columns (k_major) or its rows (mn_major).
enum class major { k, mn };

template <shared_tile ST>
inline constexpr uint64_t swizzle_code = ST::swz::bytes == 128 ? 1 : ST::swz::bytes == 64 ? 2 : ST::swz::bytes == 32 ? 3 : 0;

__device__ inline constexpr uint64_t encode(uint32_t bytes) { return (bytes & 0x3FFFF) >> 4; }

/// Descriptor of K-slice k (16 deep) of tile t, read K-major or MN-major.
template <major M, shared_tile ST>
__device__ inline uint64_t descriptor(const ST& t, int k) {
    using T = typename ST::dtype;
    constexpr uint32_t span = ST::swz::bytes;             // panel width in bytes
    constexpr uint32_t panel = ST::rows * span;            // bytes from one panel to the next
    static_assert(span != 0, "wgmma cannot read a plain row-major tile: use a swizzle or tk::interleave");
    static_assert(ST::rows % 8 == 0, "wgmma operands come in 8-row core matrices");
    uint32_t start = 0, lbo, sbo;  // the slice's offset from the tile's first byte
    if constexpr (M == major::k) {
        const int col = 16 * k;                                    // first K column of the slice
        start += (col / ST::panel_cols) * panel + (col % ST::panel_cols) * sizeof(T);
        lbo = span == 16 ? panel : 16;
        sbo = span == 16 ? 128 : 8 * span;
    } else {
        start += 16 * k * span;                                    // first K row of the slice
        lbo = span == 16 ? 128 : panel;
        sbo = span == 16 ? panel : 8 * span;
    }
    // Built as two 32-bit words: the high one (SBO, swizzle) is a constant of the tile type; the low one is
    // the tile's address and LBO, the same for every slice, plus the slice's offset. The offset is added
    // AFTER the fields are packed: no carry leaves the 14-bit address field (shared memory is smaller than
    // 256 KB), so slice k costs one add to a word computed once per tile, not a mask, an add and an OR.
    const uint32_t lo = uint32_t(encode(smem_u32(t.data)) | encode(lbo) << 16) + (start >> 4);
    const uint32_t hi = uint32_t(encode(sbo) | swizzle_code<ST> << 30);
    return uint64_t(hi) << 32 | lo;
}

}  // namespace tk::wgmma
