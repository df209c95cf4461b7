// Conversions between element types, one value or one pair at a time.
//
// The library computes element-wise maths in float (exact for bf16/half inputs) and rounds once on the
// way out, round-to-nearest-even. On sm_80+ a float2 -> bf16x2 rounding is a single cvt instruction.
#pragma once

#include "base_types.cuh"

namespace tk {

// ---- one value -----------------------------------------------------------------------------------
__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(bf16 x) { return __bfloat162float(x); }
__device__ inline float to_float(half x) { return __half2float(x); }

template <element T> __device__ inline T from_float(float x);
template <> __device__ inline float from_float<float>(float x) { return x; }
template <> __device__ inline bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ inline half from_float<half>(float x) { return __float2half_rn(x); }

// ---- one pair ------------------------------------------------------------------------------------
__device__ inline float2 to_float2(float2 x) { return x; }
__device__ inline float2 to_float2(bf16_2 x) { return __bfloat1622float2(x); }
__device__ inline float2 to_float2(half_2 x) { return __half22float2(x); }

template <element T> __device__ inline pair_t<T> from_float2(float2 x);
template <> __device__ inline float2 from_float2<float>(float2 x) { return x; }
template <> __device__ inline bf16_2 from_float2<bf16>(float2 x) { return __float22bfloat162_rn(x); }
template <> __device__ inline half_2 from_float2<half>(float2 x) { return __float22half2_rn(x); }

/// Build a pair from two values of any element type.
template <element T, typename U>
__device__ inline pair_t<T> make_pair(U lo, U hi) {
    return from_float2<T>(make_float2(to_float(lo), to_float(hi)));
}

/// A 32-bit pair seen as the raw register the tensor-core instructions take ("r" operand).
template <element16 T>
__device__ inline uint32_t& as_u32(pair_t<T>& x) { return *reinterpret_cast<uint32_t*>(&x); }
template <element16 T>
__device__ inline uint32_t as_u32(const pair_t<T>& x) { return *reinterpret_cast<const uint32_t*>(&x); }

}  // namespace tk
