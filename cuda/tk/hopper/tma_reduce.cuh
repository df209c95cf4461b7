// TMA reduce-add into a batch of matrices: a shared tile ADDED into tile (r, c) of matrix (b, h).
//
// Why: a sum whose parts come from many blocks (attention's dQ: every key block adds its share to the
// same query rows) can be left to the copy engine. One thread issues cp.reduce.async.bulk.tensor with
// .add; the engine reads the shared tile and adds it element by element into global memory, atomically
// per element, while the threads go on. The fp32 sum is then exact per addition but its ORDER is the
// order blocks arrive in, so the last bits differ run to run (as with atomicAdd from registers).
// Compared with an atomicAdd per element from every thread: one instruction per box instead of
// 64 x N / 128 atomics per thread, but the tile must go through shared memory first (fp32: 256 B a row).
//
//   tk::warpgroup::store(tile, acc);  fence_proxy_async();  <sync the writers>;
//   one thread: tma::store_add_async(map, tile, coord4{b, h, r, c}); tma::store_commit();
//               ... tma::store_wait_read<0>() before the tile is written again (and before exiting).
// Rows of the box past the end of matrix (b, h) are not written (the rank-4 map's bounds), like stores.
#pragma once

#include "tma.cuh"

namespace tk::tma {

/// Add the box at `src` into a rank-4 tensor, first element at (b, h, row, col).
__device__ inline void store_add_box(const CUtensorMap& map, const void* src, int b, int h, int row, int col) {
    asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
                 ::"l"(&map), "r"(smem_u32(src)), "r"(col), "r"(row), "r"(h), "r"(b)
                 : "memory");
}

/// Add shared tile `src` into tile (t.r, t.c) of matrix (t.b, t.h) (every box of the tile; see tma.cuh).
template <shared_tile ST>
__device__ inline void store_add_async(const CUtensorMap& map, const ST& src, coord4 t) {
    tile_boxes<ST>::each(src, {t.r, t.c}, [&](const char* p, int r, int c) { store_add_box(map, p, t.b, t.h, r, c); });
}

}  // namespace tk::tma
