// Warpgroup scope: 4 consecutive warps (128 threads) that act as one, as wgmma requires.
//
// A warpgroup starts at a warp index divisible by 4, so in a block of 384 threads warpgroup 0 is
// threads 0-127, and so on. Warp-specialised kernels give each warpgroup one role (producer: issue TMA
// copies; consumer: run wgmma) and rebalance the register file between them with setmaxnreg.
#pragma once

#include "../../common/common.cuh"

namespace tk::warpgroup {

inline constexpr int WARPS = 4;
inline constexpr int THREADS = 128;

/// Which warpgroup of the block this thread belongs to.
__device__ inline int groupid() { return threadIdx.x / THREADS; }
/// This thread's warp inside its warpgroup (0..3): the warp owning rows 16w..16w+15 of a wgmma tile.
__device__ inline int warpid() { return (threadIdx.x / WARP_THREADS) % WARPS; }
/// This thread's index inside its warpgroup (0..127).
__device__ inline int threadid() { return threadIdx.x % THREADS; }

/// Barrier for the 128 threads of one warpgroup only (hardware named barrier `id`; 0 is __syncthreads,
/// so give each warpgroup its own id >= 1).
__device__ inline void sync(int id) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(THREADS) : "memory"); }

/// setmaxnreg: every thread of the warpgroup now owns N registers (24..256, a multiple of 8). Producers
/// that only issue copies give registers back (decrease), consumers holding big accumulators take them
/// (increase). Works only when the kernel has a register cap at entry: __launch_bounds__(threads, 1).
template <int N>
__device__ inline void increase_registers() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg takes 24..256 in steps of 8");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ inline void decrease_registers() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg takes 24..256 in steps of 8");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

}  // namespace tk::warpgroup
