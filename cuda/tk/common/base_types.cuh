// Element types and the packed pairs every register tile is made of.
//
// Why pairs: a tensor-core operand register is 32 bits wide and holds TWO neighbouring 16-bit values
// (bf16 or half). Every register tile therefore stores its elements two by two, and the library does
// its element-wise arithmetic on those pairs. For float the "pair" is a float2 (two registers), so the
// same code walks fp32 accumulator tiles and 16-bit operand tiles alike.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda/std/cstdint>
#include "traits.cuh"

namespace tk {

using bf16 = __nv_bfloat16;
using bf16_2 = __nv_bfloat162;
using half = __half;
using half_2 = __half2;

/// The element types a tile may hold.
template <typename T>
concept element = tk::is_same_v<T, bf16> || tk::is_same_v<T, half> ||
                  tk::is_same_v<T, float>;

/// 16-bit elements: the ones the tensor cores (mma, ldmatrix) take as inputs.
template <typename T>
concept element16 = tk::is_same_v<T, bf16> || tk::is_same_v<T, half>;

template <element T> struct packing;
template <> struct packing<bf16> { using pair = bf16_2; };
template <> struct packing<half> { using pair = half_2; };
template <> struct packing<float> { using pair = float2; };

/// pair_t<T>: two neighbouring elements of type T, as one value (one register for 16-bit T).
template <element T> using pair_t = typename packing<T>::pair;

/// Edge of the 16x16 subtile that register tiles are made of (the mma.m16n8k16 operand shape).
inline constexpr int TILE = 16;
inline constexpr int WARP_THREADS = 32;

}  // namespace tk
