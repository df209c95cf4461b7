// The online softmax's update for one block of scores, in base 2: what chapter 09's exercise writes by hand,
// packaged for chapter 10's kernels. Not part of tk.cuh (nor of warp.cuh): a kernel includes it by name, so
// chapter 09's exercise files cannot reach it, and chapter 09 shows it only after its exercises
// (tests/test_answers_nowhere.py holds both).
//
//   online_softmax<Guarded>(scores, running_max, running_sum, scale, c):
//     scale        <- 2^(c (max before - max after)), the factor the output and the sum are rescaled by;
//     running_max  <- max(running_max, the max of each row of scores);
//     scores       <- P = 2^(c scores - c running_max), in place;
//     running_sum  <- scale * running_sum + the sum of each row of P.
//   Guarded: a row whose every score so far was masked (running max still -inf) gets scale 1 and P = 0, where
//   2^(-inf + inf) would be NaN. The output's rescale is left to the caller (it may skip it where scale is 1).
//   Ways: the row max folded as that many independent chains (reduce.cuh: a quarter of the latency at 4).
//   SumsInLanes: running_sum holds each lane's share of the row sums (no shuffles per block); the caller
//   finishes it once, after the last block, with finish_row_sum(running_sum).
//   Poly (0 to 8): of the 8 scores a lane holds in each 16 x 16 subtile, so many are exponentiated by
//   fast::exp2_poly (a cubic on the FMA pipe, tk/common/exp2_poly.cuh) and the rest by MUFU's ex2: where MUFU is
//   the busiest pipe, a share of its work moves to idle ones. 0: every score by MUFU.
#pragma once

#include "../../common/exp2_poly.cuh"
#include "maps.cuh"
#include "reduce.cuh"

namespace tk {

namespace detail {
/// scores[r][c] <- 2^(exponent(scores[r][c], running_max[r])), Poly of each subtile's 8 values per lane by
/// fast::exp2_poly, the others by fast::exp2. The choice goes by register (the same in every lane), so the warp
/// runs one stream of instructions; a row's values are split alike in every subtile.
template <int Poly, register_tile S, register_vector V, typename Exponent>
__device__ inline void exp2_split(S& scores, const V& running_max, Exponent exponent) {
    static_assert(0 < Poly && Poly <= 8, "Poly: how many of the 8 values a lane holds per 16 x 16 subtile, 1 to 8");
    static_assert(S::is_row, "the online softmax's scores are a row tile");
#pragma unroll
    for (int i = 0; i < S::height; i++) {
#pragma unroll
        for (int j = 0; j < S::width; j++) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 x = to_float2(scores.tiles[i][j].data[k]);
                const float m = to_float(running_max.data[i][k & 1]);  // rows g and g + 8 alternate
                const float e0 = exponent(x.x, m), e1 = exponent(x.y, m);
                scores.tiles[i][j].data[k] = from_float2<typename S::dtype>(
                    make_float2(2 * k < Poly ? fast::exp2_poly(e0) : fast::exp2(e0),
                                2 * k + 1 < Poly ? fast::exp2_poly(e1) : fast::exp2(e1)));
            }
        }
    }
}
}  // namespace detail

template <bool Guarded, int Ways = 1, bool SumsInLanes = false, int Poly = 0, register_tile S, register_vector V>
__device__ inline void online_softmax(S& scores, V& running_max, V& running_sum, V& scale, float c) {
    copy(scale, running_max);
    row_max<Ways>(running_max, scores, running_max);
    // scale = 2^(c (max before - max after)); P's exponent c x - c max. Guarded, for a row whose max is still
    // -inf: scale 1, and the exponent c x (= -inf, P = 0).
    map(scale, scale, running_max, [c](float before, float after) {
        return Guarded && after == neg_inf ? 1.0f : fast::exp2(c * (before - after));
    });
    const auto exponent = [c](float x, float after) { return c * x - (Guarded && after == neg_inf ? 0.0f : c * after); };
    if constexpr (Poly > 0) detail::exp2_split<Poly>(scores, running_max, exponent);
    else map_row(scores, scores, running_max, [exponent](float x, float after) { return fast::exp2(exponent(x, after)); });
    V block_sum;
    if constexpr (SumsInLanes) row_sum_lanes<Ways>(block_sum, scores);
    else row_sum<Ways>(block_sum, scores);
    map(running_sum, running_sum, scale, block_sum, [](float l, float a, float r) { return a * l + r; });
}

}  // namespace tk
