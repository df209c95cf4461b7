// TMA for whole shared tiles: the copies that fill an st<> from a tensor map, and write it back.
//
// An st<> with a swizzle is stored as panels one swizzle span wide (st.cuh); TMA writes one panel per
// box (at most 256 rows), so a tile takes panels x row-blocks copies, each landing at the panel's own
// offset. The tensor map must have been built for this tile (tklab.tma.tensor_map(x, (R, C))): its box
// is one panel and its swizzle the tile's. Tile coordinates count in tiles, as for gl<> (coord{r, c}
// = rows [r*R, r*R+R), columns [c*C, c*C+C)).
//
// Loading, as one producer thread does it:
//     tk::tma::expect(bar, tile);                          // announce the bytes the tile will bring,
//     tk::tma::load_async(tile, tmap, bar, {i, k});        // start the copies;
//     ...  tk::wait(bar, phase);                            // consumers wait for the bytes.
// Every call takes its arguments in one order: destination, source, barrier (loads), coordinate.
//
// Tensors with batch dimensions ([batch, heads, seq, d], a rank-4 map from tklab.tma.tensor_map) take a
// coord4{b, h, r, c}: the tile is rows [r*R, r*R+R) of matrix (b, h). Rows past that matrix's end read
// as zeros and are not written back -- a tile never spills into the next head.
#pragma once

#include "../types/shared/st.cuh"
#include "../types/global/gl.cuh"
#include "tma_raw.cuh"

namespace tk {
/// A tile's position in a batch of matrices: matrix (b, h), tile (r, c) inside it, in tiles.
struct coord4 {
    int b, h, r, c;
    __host__ __device__ constexpr coord4(int b_, int h_, int r_, int c_) : b(b_), h(h_), r(r_), c(c_) {}
};
}  // namespace tk

namespace tk::tma {

/// How TMA sees a shared tile: box = panel_cols x box_rows, repeated over panels and row blocks.
template <shared_tile ST>
struct tile_boxes {
    static constexpr int box_rows = ST::rows < 256 ? ST::rows : 256;
    static constexpr int row_blocks = ST::rows / box_rows;
    static_assert(ST::rows % box_rows == 0, "TMA tiles taller than 256 rows must be a multiple of 256");
    static_assert(ST::panel_cols <= 256, "an unswizzled TMA tile row is at most 256 elements");
    static_assert(alignof(ST) >= 128, "TMA moves shared memory at 128-byte-aligned addresses: use a swizzled "
                  "st (1024-aligned) or tk::interleave; a plain row-major st needs a 128-byte-aligned layout policy");

    /// Issue op(shared pointer, row, col) for every box of tile t.
    template <typename Op>
    __device__ static void each(const ST& tile, coord t, Op op) {
#pragma unroll
        for (int p = 0; p < ST::panels; ++p) {
#pragma unroll
            for (int b = 0; b < row_blocks; ++b) {
                const int r = b * box_rows, c = p * ST::panel_cols;
                op(reinterpret_cast<const char*>(tile.data) + ST::byte_offset(r, c), t.r * ST::rows + r,
                   t.c * ST::cols + c);
            }
        }
    }
};

/// Bytes that TMA delivers for these tiles: what their mbarrier must expect. (Not sizeof: a swizzled
/// tile's alignment can pad sizeof beyond its data, e.g. st_bf<16, 16> is 512 bytes in a 1024 sizeof.)
template <shared_tile... STs>
inline constexpr uint32_t bytes = (uint32_t(STs::bytes) + ...);

/// Announce, with one arrival, the bytes that loading these tiles will bring (the producer's call).
template <shared_tile... STs>
__device__ inline void expect(mbarrier& bar, const STs&...) { arrive_expect_bytes(bar, bytes<STs...>); }

/// Start loading tile t of the tensor into `dst`; `bar` receives bytes<ST> bytes when it lands.
template <shared_tile ST>
__device__ inline void load_async(ST& dst, const CUtensorMap& map, mbarrier& bar, coord t) {
    tile_boxes<ST>::each(dst, t, [&](const char* p, int r, int c) { load_box(const_cast<char*>(p), map, bar, r, c); });
}

/// The same for a rank-4 map: tile (t.r, t.c) of matrix (t.b, t.h).
template <shared_tile ST>
__device__ inline void load_async(ST& dst, const CUtensorMap& map, mbarrier& bar, coord4 t) {
    tile_boxes<ST>::each(dst, {t.r, t.c}, [&](const char* p, int r, int c) {
        load_box(const_cast<char*>(p), map, bar, t.b, t.h, r, c);
    });
}

/// Start storing `src` to tile t of the tensor. Then store_commit(), and store_wait_read() before
/// overwriting src. Threads that wrote src with ordinary stores must fence_proxy_async() first.
template <shared_tile ST>
__device__ inline void store_async(const CUtensorMap& map, const ST& src, coord t) {
    tile_boxes<ST>::each(src, t, [&](const char* p, int r, int c) { store_box(map, p, r, c); });
}

/// The same for a rank-4 map: rows past the end of matrix (t.b, t.h) are not written.
template <shared_tile ST>
__device__ inline void store_async(const CUtensorMap& map, const ST& src, coord4 t) {
    tile_boxes<ST>::each(src, {t.r, t.c}, [&](const char* p, int r, int c) { store_box(map, p, t.b, t.h, r, c); });
}

/// Like store_async, but adds src into the tensor (atomic per element: tiles from many blocks may meet).
template <shared_tile ST>
__device__ inline void store_add_async(const CUtensorMap& map, const ST& src, coord t) {
    tile_boxes<ST>::each(src, t, [&](const char* p, int r, int c) { store_add_box(map, p, r, c); });
}

}  // namespace tk::tma
