// One panel of a swizzled shared tile, as a shared tile of its own.
//
// A swizzled st<T, R, C> is stored as C / panel_cols column panels, one after the other, each R rows of
// one swizzle span (st.cuh). So columns [j * panel_cols, (j + 1) * panel_cols) are R * span contiguous
// bytes, swizzled exactly like a tile of that width, and starting on a 1024-byte boundary whenever R is
// a multiple of 8 (R * 128 bytes for a 128B swizzle). Seen as st<T, R, panel_cols>, a panel can be a wgmma
// operand or a TMA source by itself: e.g. half of a 64 x 128 bf16 tile's columns as a 64 x 64 B operand
// (attention backward: each consumer warpgroup multiplies by its half of K's columns). No data moves.
#pragma once

#include "st.cuh"

namespace tk {

/// The tile type one panel of ST is.
template <shared_tile ST>
using panel_t = st<typename ST::dtype, ST::rows, ST::panel_cols, typename ST::swz>;

/// Panel j of tile t (columns j * panel_cols ..), by reference.
template <shared_tile ST>
__device__ inline panel_t<ST>& panel(ST& t, int j) {
    static_assert(ST::swz::bytes != 0, "panel(): a plain row-major tile has no panels (it is one)");
    static_assert((ST::rows * ST::swz::bytes) % ST::swz::alignment == 0,
                  "panel(): each panel must start on the swizzle's alignment (rows a multiple of 8)");
    return *reinterpret_cast<panel_t<ST>*>(reinterpret_cast<char*>(t.data) + j * ST::rows * ST::swz::bytes);
}
template <shared_tile ST>
__device__ inline const panel_t<ST>& panel(const ST& t, int j) {
    return panel(const_cast<ST&>(t), j);
}

}  // namespace tk
