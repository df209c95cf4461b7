// Type conversion: copy(d, a) between register tiles (or vectors) of the same shape and layout.
//
// The usual use: an fp32 accumulator rounded to bf16 so it can be stored, or fed to the next mma as
// an A operand. Because the accumulator and the A operand share one fragment layout (layout.cuh), the
// conversion is register-local: no lane talks to another.
#pragma once

#include "maps.cuh"

namespace tk {

/// d = a, converted element by element (round to nearest even).
template <register_object D, register_object A>
    requires same_shape<D, A>
__device__ inline void copy(D& d, const A& a) { map(d, a, op::copy{}); }

}  // namespace tk
