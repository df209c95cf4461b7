// TMA multicast: one copy from global memory that lands in the shared memory of several blocks of a
// cluster (cluster.cuh) at once.
//
// Two blocks of a cluster that compute C tiles side by side in M need the same K-slice of B. Without
// multicast each fetches it from L2; with it, each fetches HALF of the slice and sends its half to both
// blocks: L2 serves B once per cluster instead of once per block. The copy writes the same offset in
// every destination block (so the tile must sit at the same place in each: same shared-memory layout)
// and signals the mbarrier at the same offset in each, which counts the bytes as usual. So every block
// expects the WHOLE tile's bytes (tma::expect as always): its own share and the others' arrive there.
//
//     tma::expect(full, a, b);                                  // every block: all of a and b
//     tma::load_async(a, map_a, full, {row, k});                // own A tile
//     tma::load_async_multicast(b, map_b, full, {k, col}, cluster::rank(), CLUSTER);   // my share of B
//
// Since another block writes into this one's stage, a stage may be refilled only when the consumers
// of EVERY block of the cluster have handed it back (cluster::arrive_all on each block's empty barrier).
#pragma once

#include "tma.cuh"

namespace tk::tma {

/// Load one box into shared memory at `dst` in every block whose bit is set in `blocks` (bit i: rank i);
/// each destination's mbarrier at `bar`'s offset receives the bytes.
__device__ inline void load_box_multicast(void* dst, const CUtensorMap& map, mbarrier& bar, int row, int col,
                                          uint16_t blocks) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4}], [%2], %5;\n"
        ::"r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(&bar)), "r"(col), "r"(row), "h"(blocks)
        : "memory");
}

/// This block's share of tile t, sent to all `parts` blocks of the cluster (ranks 0 .. parts-1): the
/// tile's boxes (tma.cuh: one per panel and row block) are dealt out in turn, box i to rank i % parts.
/// Each block of the cluster calls it with its own `part` = cluster::rank(), so together they load the
/// whole tile once, and every block receives all of it.
template <shared_tile ST>
__device__ inline void load_async_multicast(ST& dst, const CUtensorMap& map, mbarrier& bar, coord t, int part,
                                            int parts) {
    static_assert(tile_boxes<ST>::row_blocks * ST::panels >= 2, "a tile of one box cannot be shared out");
    const uint16_t everyone = uint16_t((1u << parts) - 1);
    int box = 0;
    tile_boxes<ST>::each(dst, t, [&](const char* p, int r, int c) {
        if (box++ % parts == part) load_box_multicast(const_cast<char*>(p), map, bar, r, c, everyone);
    });
}

}  // namespace tk::tma
