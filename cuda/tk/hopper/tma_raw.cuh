// TMA, one instruction at a time: the bulk tensor copies between global and shared memory.
//
// A copy names a box of the tensor by the coordinates of its first element (PTX lists them innermost
// first: column, then row, then any outer dimensions; our functions take them outermost first, as the
// tensor is indexed), and the tensor map (tensor_map.cuh) supplies everything else: address, strides,
// box size and the swizzle TMA applies while writing shared memory. One thread issues a copy; the
// hardware moves the whole box.
//   * load:  completes on an mbarrier, which counts the bytes as they land (mbarrier.cuh).
//   * store, store-add: read shared memory asynchronously; the issuing thread groups them with
//     store_commit() and waits with store_wait<N>() before overwriting the source or exiting.
#pragma once

#include "mbarrier.cuh"
#include "tensor_map.cuh"

namespace tk::tma {

/// Load the box whose first element is (row, col) into shared memory at `dst`; signals `bar`.
__device__ inline void load_box(void* dst, const CUtensorMap& map, mbarrier& bar, int row, int col) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
        ::"r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(&bar)), "r"(col), "r"(row)
        : "memory");
}

/// The same for a rank-4 map ([batch, heads, rows, cols] tensors): the box's first element is
/// (b, h, row, col). Elements of the box outside the tensor arrive as zeros (and still count as bytes).
__device__ inline void load_box(void* dst, const CUtensorMap& map, mbarrier& bar, int b, int h, int row, int col) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
        ::"r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(&bar)), "r"(col), "r"(row), "r"(h), "r"(b)
        : "memory");
}

/// Store the box at `src` to the tensor, first element at (row, col).
__device__ inline void store_box(const CUtensorMap& map, const void* src, int row, int col) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
                 ::"l"(&map), "r"(smem_u32(src)), "r"(col), "r"(row)
                 : "memory");
}

/// The same for a rank-4 map; elements of the box outside the tensor are not written.
__device__ inline void store_box(const CUtensorMap& map, const void* src, int b, int h, int row, int col) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
                 ::"l"(&map), "r"(smem_u32(src)), "r"(col), "r"(row), "r"(h), "r"(b)
                 : "memory");
}

/// Add the box at `src` into the tensor (element-wise, atomically per element), first element at (row, col).
__device__ inline void store_add_box(const CUtensorMap& map, const void* src, int row, int col) {
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];\n"
                 ::"l"(&map), "r"(smem_u32(src)), "r"(col), "r"(row)
                 : "memory");
}

/// Close the group of stores this thread issued since the last commit.
__device__ inline void store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

/// Wait until at most N committed store groups still READ shared memory: their sources may be reused.
template <int N = 0>
__device__ inline void store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

/// Wait until at most N committed store groups are unfinished: their writes are done in global memory.
template <int N = 0>
__device__ inline void store_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

/// Fetch the tensor map into the cache ahead of its first use (optional; one thread).
__device__ inline void prefetch(const CUtensorMap& map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(&map) : "memory");
}

}  // namespace tk::tma
