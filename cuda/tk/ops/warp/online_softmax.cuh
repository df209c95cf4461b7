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
#pragma once

#include "maps.cuh"
#include "reduce.cuh"

namespace tk {

template <bool Guarded, int Ways = 1, bool SumsInLanes = false, register_tile S, register_vector V>
__device__ inline void online_softmax(S& scores, V& running_max, V& running_sum, V& scale, float c) {
    copy(scale, running_max);
    row_max<Ways>(running_max, scores, running_max);
    if constexpr (Guarded) {
        map(scale, scale, running_max,
            [c](float before, float after) { return after == neg_inf ? 1.0f : fast::exp2(c * (before - after)); });
        map_row(scores, scores, running_max,
                [c](float x, float after) { return fast::exp2(c * x - (after == neg_inf ? 0.0f : c * after)); });
    } else {
        map(scale, scale, running_max, [c](float before, float after) { return fast::exp2(c * (before - after)); });
        map_row(scores, scores, running_max, [c](float x, float after) { return fast::exp2(c * x - c * after); });
    }
    V block_sum;
    if constexpr (SumsInLanes) row_sum_lanes<Ways>(block_sum, scores);
    else row_sum<Ways>(block_sum, scores);
    map(running_sum, running_sum, scale, block_sum, [](float l, float a, float r) { return a * l + r; });
}

}  // namespace tk
