// Swizzling: where a shared tile puts each 16-byte chunk, so that reading a column does not hit one bank.
//
// Shared memory has 32 banks of 4 bytes; a 128-byte line touches each bank once. ldmatrix reads 8 rows
// x 16 bytes at a time; in a plain row-major tile whose rows are 128 bytes apart those 8 chunks all
// land in the same 4 banks -- an 8-way conflict. Swizzling XORs the chunk's position in its line with
// the row number, so the 8 chunks of a column land in 8 different places.
//
// Hopper's copy engine (TMA) and wgmma know three such patterns, defined on the BYTE ADDRESS:
//   128B: bits [6:4] ^= bits [9:7]   (8 chunks per 128-byte row, pattern repeats every 1024 bytes)
//    64B: bits [5:4] ^= bits [8:7]   (4 chunks per 64-byte row,  repeats every 512 bytes)
//    32B: bit  4     ^= bit  7       (2 chunks per 32-byte row,  repeats every 256 bytes)
// Only bits >= 4 move, so a 16-byte chunk stays whole (ldmatrix rows and cp.async copies stay legal).
// The hardware applies the XOR to the absolute shared address, so a swizzled tile must start at a
// multiple of 1024 bytes (alignment below) for our offsets to agree with TMA's and wgmma's.
#pragma once

#include "../../common/common.cuh"

namespace tk {

template <int Bytes>
struct swizzle {
    static_assert(Bytes == 0 || Bytes == 32 || Bytes == 64 || Bytes == 128, "swizzle: 0, 32, 64 or 128 bytes");
    /// Width of the swizzled row ("span") in bytes; 0 means no swizzle.
    static constexpr int bytes = Bytes;
    /// Alignment the tile's storage needs: 1024 when swizzled (every pattern repeats within 1024 bytes);
    /// 128 otherwise, the least the copy engine (TMA) accepts for a shared-memory destination.
    static constexpr int alignment = Bytes ? 1024 : 128;

    __host__ __device__ static constexpr uint32_t apply(uint32_t byte) {
        if constexpr (Bytes == 0) {
            return byte;
        } else {
            constexpr uint32_t mask = Bytes / 16 - 1;  // 128B: 0b111, 64B: 0b11, 32B: 0b1
            return byte ^ (((byte >> 7) & mask) << 4);
        }
    }
};

using swizzle_none = swizzle<0>;
using swizzle_32B = swizzle<32>;
using swizzle_64B = swizzle<64>;
using swizzle_128B = swizzle<128>;

/// The widest pattern the row width (in bytes) allows: rows of 128 bytes or a multiple get 128B, etc.
template <element T, int C>
using default_swizzle = swizzle<(C * sizeof(T)) % 128 == 0 ? 128
                                : (C * sizeof(T)) % 64 == 0 ? 64
                                : (C * sizeof(T)) % 32 == 0 ? 32
                                                            : 0>;

}  // namespace tk
