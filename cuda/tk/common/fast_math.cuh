// Fast special functions: one hardware instruction each, for the exponentials of softmax.
//
// The special-function unit (MUFU in SASS) computes 2^x, log2(x) and 1/x approximately in a single
// instruction. The accurate library versions (exp2f, log2f, a / b) wrap it in range checks and Newton
// steps: exp2f costs an extra compare and two multiplies per element, an IEEE divide a dozen
// instructions and a branch. Attention evaluates one exponential per score, so it uses these.
//
// Accuracy, measured on an H200 against float64 (tests/test_fast_math_gpu.py, bench/results/):
// see the numbers stated beside each function; all three flush denormal inputs and results to zero
// (.ftz), which softmax never needs: 2^x for x < -126 is 0 to within bf16's precision anyway.
#pragma once

namespace tk::fast {

/// 2^x with ex2.approx: relative error ~2^-22 (see the header comment for the measured bound).
/// exp2(-inf) = 0, which is what masked scores rely on.
__device__ inline float exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/// log2(x) with lg2.approx: absolute error ~2^-22 near 1, relative elsewhere. log2(0) = -inf.
__device__ inline float log2(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/// Natural log: log2(x) * ln 2.
__device__ inline float log(float x) { return log2(x) * 0.69314718055994531f; }

/// 1/x with rcp.approx: within 1 ulp. One per row of a tile instead of a divide per element.
__device__ inline float rcp(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

}  // namespace tk::fast
