// Setting every element of a register tile or vector: zero(x), fill(x, v).
#pragma once

#include "../../types/types.cuh"

namespace tk {

/// x = v everywhere (v rounded to x's element type).
template <register_object X>
__device__ inline void fill(X& x, float v) {
    using T = typename X::dtype;
#pragma unroll
    for (int i = 0; i < X::n_regs; i++) {
        if constexpr (tk::is_same_v<typename X::reg_t, T>) x.reg(i) = from_float<T>(v);
        else x.reg(i) = from_float2<T>(make_float2(v, v));
    }
}

/// x = 0: the usual start of an accumulator.
template <register_object X>
__device__ inline void zero(X& x) { fill(x, 0.0f); }

}  // namespace tk
