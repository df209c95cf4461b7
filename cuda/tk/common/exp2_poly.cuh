// 2^x without the special-function unit: a cubic on the FMA pipe, and the integer part added into the exponent.
//
// Why: a softmax evaluates one exponential per score, and fast::exp2 is one MUFU.EX2. An SM issues MUFU at 16
// results per clock against 128 for FFMA, so in attention at d = 64 (few multiply-adds per score) MUFU is the
// busiest pipe after the tensor cores while the FMA and ALU pipes have room. Computing some of a block's
// exponentials here, with about eight FMA/ALU instructions each, moves that work to the idle pipes; the caller
// decides how many (tk::online_softmax's Poly: so many of each 8 a lane holds).
//
// How: 2^x = 2^floor(x) * 2^f with f = x - floor(x) in [0, 1).
//   * floor(x) without a conversion instruction (F2I and FRND run on MUFU's pipe too): add 1.5 * 2^23 rounding
//     down. Between 2^23 and 2^24 a float's last bit is worth 1, so the sum is 1.5 * 2^23 + floor(x) exactly, and
//     floor(x) sits in its low mantissa bits; subtracting 1.5 * 2^23 again gives floor(x) as a float, exactly.
//   * 2^f by a cubic in Horner form (three FFMA), its constant term exactly 1, its other coefficients fitted to
//     the smallest maximum relative error on [0, 1) (a minimax fit): 8.6e-5, about 2^-13.5.
//   * 2^floor(x): shift the sum's low bits into the exponent field (bits 23..30) and add them to the cubic's
//     bits, whose exponent is that of [1, 2). The sum's high bits (those of 1.5 * 2^23) shift out of the word.
// Accuracy: relative error below 2^-13 for x in [-126, 0] (tests/test_exp2_poly.py measures it against float64
// on a dense sweep and holds it below 2^-12). P is rounded to bf16 next, whose 8 bits err by up to 2^-9: the
// cubic's error is a sixteenth of that rounding. fast::exp2 (MUFU) errs by ~2^-22.
// Range: x <= -127, and -inf (a masked score), give exactly 0: x is clamped to -127, where f = 0 makes the cubic
// exactly 1.0 (0x3f800000) and adding -127 to its exponent leaves all bits 0. x in (-127, -126) gives a value
// below 2^-126 (a denormal that any .ftz arithmetic reads as 0; MUFU's ex2.ftz returns 0 there). The softmax
// calls it on x <= 0 (a score minus its row's max); it stays right up to x < 127. NaN gives 0, not NaN.
#pragma once

namespace tk::fast {

/// 2^x on the FMA and ALU pipes (no MUFU): relative error below 2^-13 on [-126, 0]; 0 for x <= -127 and -inf.
__device__ inline float exp2_poly(float x) {
    constexpr float shifter = 12582912.0f;  // 1.5 * 2^23: its last mantissa bit is worth 1
    constexpr float c1 = 0.6951168179512024f, c2 = 0.22764484584331512f, c3 = 0.07706717401742935f;
    x = fmaxf(x, -127.0f);
    const float shifted = __fadd_rd(x, shifter);  // 1.5 * 2^23 + floor(x)
    const float f = x - (shifted - shifter);      // x - floor(x), in [0, 1): exact
    const float p = fmaf(fmaf(fmaf(c3, f, c2), f, c1), f, 1.0f);  // 2^f, in [1, 2]
    return __int_as_float(__float_as_int(p) + (__float_as_int(shifted) << 23));  // times 2^floor(x)
}

}  // namespace tk::fast
