// A warpgroup's fp32 accumulator parked in memory exactly as it sits in its registers, and read back.
//
// Why: some tiles go through shared memory only to be moved on unchanged -- chapter 11's dQ part, which the copy
// engine adds into global memory and a last pass turns into bf16. Nothing reads such a tile by position on the way,
// so its positions need not be the matrix's. Stored register by register instead, two pairs (16 bytes) per store,
// thread after thread, a warp's 32 stores cover 512 contiguous bytes: no bank conflict, no swizzle, one STS.128
// per 4 registers and no address arithmetic beyond one base (placing each pair at its (row, column) costs a
// swizzled address per pair). The one who finally needs positions reads the block back into the same register
// tile with load_fragments, where for_each_pair says where each value belongs, as for any tile.
//
//   warp w of the warpgroup holds rows 16w..16w+15 of its 64 x N accumulator as rt_fl<16, N>:
//   store_fragments(buf, acc);   buf: 64 N floats, 16-byte aligned; register pairs 2k, 2k+1 of thread t of the
//                                warpgroup at float4 k * 128 + t
//   load_fragments(acc, buf);    the inverse, in a warpgroup (or a 128-thread block) of the same shape
#pragma once

#include "../../types/register/rt.cuh"
#include "scope.cuh"

namespace tk::warpgroup {

template <typename RT>
concept parkable = register_tile<RT> && tk::is_same_v<typename tk::remove_cvref_t<RT>::dtype, float> &&
                   tk::remove_cvref_t<RT>::n_regs % 2 == 0;

/// Thread threadid()'s registers of `t` into `dst` (shared or global), 16 bytes at a time, thread-interleaved.
template <parkable RT>
__device__ inline void store_fragments(void* dst, const RT& t) {
    float4* out = static_cast<float4*>(dst) + threadid();
#pragma unroll
    for (int k = 0; k < RT::n_regs / 2; ++k) {
        const float2 a = t.reg(2 * k), b = t.reg(2 * k + 1);
        out[k * THREADS] = make_float4(a.x, a.y, b.x, b.y);
    }
}

/// The inverse of store_fragments: thread threadid() gets back the registers it (or its namesake) stored.
template <parkable RT>
__device__ inline void load_fragments(RT& t, const void* src) {
    const float4* in = static_cast<const float4*>(src) + threadid();
#pragma unroll
    for (int k = 0; k < RT::n_regs / 2; ++k) {
        const float4 v = in[k * THREADS];
        t.reg(2 * k) = make_float2(v.x, v.y);
        t.reg(2 * k + 1) = make_float2(v.z, v.w);
    }
}

}  // namespace tk::warpgroup
