// Small helpers: who am I inside the warp, and a few constants.
#pragma once

#include <cuda/std/cstdint>


namespace tk {

/// This thread's lane (0..31) inside its warp.
__device__ inline int laneid() { return threadIdx.x % 32; }
/// This thread's warp inside the block (threadIdx.x / 32; blocks are launched one-dimensional).
__device__ inline int warpid() { return threadIdx.x / 32; }

/// Minus infinity, the identity of max(): start a running maximum here.
inline constexpr float neg_inf = __builtin_bit_cast(float, 0xff800000u);  // bits of -inf

/// Shared-memory address (the 32-bit address space ldmatrix, cp.async and stmatrix take).
__device__ inline uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

}  // namespace tk
