// Masks: overwrite the elements of a register tile whose position fails a test.
//
// Attention needs two: the causal mask (query r may not see key c > r) and the sequence end (keys at
// or past the length do not exist). Both test the element's position in the WHOLE matrix, so the
// caller says where the tile sits (its first row and column) and each lane works out, from the
// fragment layout (layout.cuh), which rows and columns its registers hold. Writing -inf there makes
// the softmax give those keys weight exp(-inf) = 0.
//
// A mask costs a compare and a select per element: call it only on the blocks that need it (the
// diagonal blocks for causal, the last block for the sequence end), never on every block.
#pragma once

#include "../../types/types.cuh"

namespace tk {

/// t[r][c] = value wherever pred(row0 + r, col0 + c) holds (positions in the whole matrix).
template <register_tile RT, typename Pred>
__device__ inline void mask_if(RT& t, int row0, int col0, Pred pred, float value) {
    using T = typename RT::dtype;
    for_each_pair(t, [&](pair_t<T>& pair, rc at, rc e0, rc e1) {
        const int r = row0 + at.r, c = col0 + at.c;
        float2 x = to_float2(pair);
        if (pred(r + e0.r, c + e0.c)) x.x = value;
        if (pred(r + e1.r, c + e1.c)) x.y = value;
        pair = from_float2<T>(x);
    });
}

/// Causal: t[r][c] = -inf where key c comes after query r. (row0, col0): where t sits in the scores.
template <register_tile RT>
__device__ inline void causal_mask(RT& t, int row0, int col0) {
    mask_if(t, row0, col0, [](int r, int c) { return c > r; }, neg_inf);
}

/// Sequence end: t[r][c] = -inf for keys c >= length. col0: the tile's first key.
template <register_tile RT>
__device__ inline void mask_keys_from(RT& t, int col0, int length) {
    mask_if(t, 0, col0, [length](int, int c) { return c >= length; }, neg_inf);
}

}  // namespace tk
