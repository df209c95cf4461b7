// Shared vectors: N values in shared memory, plain and contiguous (a vector has no columns to swizzle).
#pragma once

#include "../../common/common.cuh"

namespace tk {

template <element T, int N>
struct alignas(16) sv {
    static_assert(N % TILE == 0, "vector length must be a multiple of 16");
    using dtype = T;
    static constexpr int length = N;
    T data[N];
    __device__ T& operator[](int i) { return data[i]; }
    __device__ const T& operator[](int i) const { return data[i]; }
};

template <int N> using sv_bf = sv<bf16, N>;
template <int N> using sv_hf = sv<half, N>;
template <int N> using sv_fl = sv<float, N>;

}  // namespace tk
