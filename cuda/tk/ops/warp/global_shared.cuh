// Global memory <-> shared tiles, 16 bytes per thread per step, by one warp or several together.
//
// The copy is cut into 16-byte chunks (8 bf16 or 4 fp32), handed to threads in row order so that
// neighbouring lanes read neighbouring global addresses (coalesced). Each chunk lands at its swizzled
// place: a swizzle only moves whole 16-byte chunks (swizzle.cuh), so a chunk stays one copy.
//
// load_async uses cp.async (sm_80+): the copy runs in the background, straight from L2 to shared memory
// without passing through registers. It is asynchronous: commit the copies issued so far as a group with
// cp_async_commit(), and before reading the tile wait until at most N groups are still in flight with
// cp_async_wait<N>(), then __syncthreads() so that every thread sees every other thread's chunks.
//
// W (template argument, default 1) is how many warps share the copy: call it from all W consecutive
// warps (warps w with the same w / W), e.g. load_async<4>(a_smem, A, {i, k}) from a 4-warp block.
#pragma once

#include "../../types/types.cuh"

namespace tk {

/// Start an asynchronous 16-byte copy global -> shared (cache in L2 only: tiles are used from smem).
__device__ inline void cp_async_16(uint32_t smem_addr, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr), "l"(gmem) : "memory");
}
/// The same, but copies 16 zero bytes instead when `valid` is false (cp.async's source size 0: nothing is
/// read from gmem, which may then point anywhere).
__device__ inline void cp_async_16_or_zero(uint32_t smem_addr, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr), "l"(gmem), "r"(valid ? 16 : 0)
                 : "memory");
}
/// Close the group of copies this thread issued since the last commit.
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
/// Wait until at most N of this thread's committed groups are still in flight.
template <int N = 0>
__device__ inline void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

namespace detail {
/// Calls f(r, c, s) for the chunks of an R x C tile that this thread (of W warps) handles.
///
/// When the W warps cover whole rows per step, and a multiple of 8 rows (as for 64 x 128 bf16 tiles and
/// 4 warps: 16 chunks a row, 8 rows a step), a thread keeps its column and moves down a fixed number of
/// rows per chunk; since every swizzle pattern repeats each 8 rows, its shared address moves by a fixed
/// number of bytes too. f then gets s = the chunk's shared-memory byte offset computed that way (one add),
/// else s = the tile's own byte_offset(r, c).
template <int W, typename ST, int ChunkElems, typename F>
__device__ inline void for_each_chunk_of(F f) {
    constexpr int R = ST::rows, C = ST::cols;
    constexpr int per_row = C / ChunkElems, total = R * per_row, threads = W * WARP_THREADS;
    const int tid = laneid() + WARP_THREADS * (warpid() % W);
    if constexpr (threads % per_row == 0 && total % threads == 0 && (threads / per_row) % 8 == 0) {
        constexpr int rows_per_step = threads / per_row;
        const int r0 = tid / per_row, c = tid % per_row * ChunkElems;
        const uint32_t s0 = ST::byte_offset(r0, c);
#pragma unroll
        for (int step = 0; step < total / threads; step++)
            f(r0 + step * rows_per_step, c, s0 + uint32_t(step * rows_per_step * ST::row_bytes));
    } else {
#pragma unroll
        for (int step = 0; step < (total + threads - 1) / threads; step++) {
            const int chunk = step * threads + tid;
            if (total % threads == 0 || chunk < total) {
                const int r = chunk / per_row, c = chunk % per_row * ChunkElems;
                f(r, c, ST::byte_offset(r, c));
            }
        }
    }
}

/// Calls f(r, c) for the chunks of an R x C tile that this thread (of W warps) handles.
template <int W, int R, int C, int ChunkElems, typename F>
__device__ inline void for_each_chunk(F f) {
    constexpr int per_row = C / ChunkElems, total = R * per_row, threads = W * WARP_THREADS;
    const int tid = laneid() + WARP_THREADS * (warpid() % W);
#pragma unroll
    for (int step = 0; step < (total + threads - 1) / threads; step++) {
        const int chunk = step * threads + tid;
        if (total % threads == 0 || chunk < total) f(chunk / per_row, chunk % per_row * ChunkElems);
    }
}
}  // namespace detail

/// dst = tile t of src, asynchronously (cp.async). See the commit/wait protocol above.
template <int W = 1, element T, int R, int C, typename S, typename U>
__device__ inline void load_async(st<T, R, C, S>& dst, const gl<U>& src, coord t) {
    static_assert(tk::is_same_v<tk::remove_cv_t<U>, T>, "load_async copies bytes: same element type");
    const U* base = src.template tile_ptr<R, C>(t);
    const uint32_t smem = smem_u32(dst.data);
    detail::for_each_chunk_of<W, st<T, R, C, S>, 16 / sizeof(T)>([&](int r, int c, uint32_t off) {
        cp_async_16(smem + off, base + size_t(r) * src.stride + c);
    });
}

/// Like load_async, for the ragged last tile of a matrix: rows at or past src.rows arrive as zeros (the
/// tile's rows must still be whole: src.cols a multiple of the tile's columns).
template <int W = 1, element T, int R, int C, typename S, typename U>
__device__ inline void load_async_bounded(st<T, R, C, S>& dst, const gl<U>& src, coord t) {
    static_assert(tk::is_same_v<tk::remove_cv_t<U>, T>, "load_async copies bytes: same element type");
    const U* base = src.template tile_ptr<R, C>(t);
    const uint32_t smem = smem_u32(dst.data);
    const int rows_left = src.rows - t.r * R;
    detail::for_each_chunk_of<W, st<T, R, C, S>, 16 / sizeof(T)>([&](int r, int c, uint32_t off) {
        const bool valid = r < rows_left;
        cp_async_16_or_zero(smem + off, valid ? base + size_t(r) * src.stride + c : src.ptr, valid);
    });
}

/// dst = tile t of src, through registers (synchronous; __syncthreads() before other warps read it).
template <int W = 1, element T, int R, int C, typename S, typename U>
__device__ inline void load(st<T, R, C, S>& dst, const gl<U>& src, coord t) {
    static_assert(tk::is_same_v<tk::remove_cv_t<U>, T>, "load: same element type");
    const U* base = src.template tile_ptr<R, C>(t);
    detail::for_each_chunk<W, R, C, 16 / sizeof(T)>([&](int r, int c) {
        *reinterpret_cast<uint4*>(&dst(r, c)) = *reinterpret_cast<const uint4*>(base + size_t(r) * src.stride + c);
    });
}

/// Tile t of dst = src (synchronous; __syncthreads() first if other warps wrote src).
template <int W = 1, typename U, element T, int R, int C, typename S>
__device__ inline void store(const gl<U>& dst, const st<T, R, C, S>& src, coord t) {
    static_assert(tk::is_same_v<U, T>, "store: same element type (and a writable gl)");
    U* base = dst.template tile_ptr<R, C>(t);
    detail::for_each_chunk<W, R, C, 16 / sizeof(T)>([&](int r, int c) {
        *reinterpret_cast<uint4*>(base + size_t(r) * dst.stride + c) = *reinterpret_cast<const uint4*>(&src(r, c));
    });
}

}  // namespace tk

namespace tk {
/// Like store(gl, st, t), for the ragged last tile: rows at or past dst.rows are not written.
template <int W = 1, typename U, element T, int R, int C, typename S>
__device__ inline void store_bounded(const gl<U>& dst, const st<T, R, C, S>& src, coord t) {
    static_assert(tk::is_same_v<U, T>, "store: same element type (and a writable gl)");
    U* base = dst.template tile_ptr<R, C>(t);
    const int rows_left = dst.rows - t.r * R;
    detail::for_each_chunk<W, R, C, 16 / sizeof(T)>([&](int r, int c) {
        if (r < rows_left)
            *reinterpret_cast<uint4*>(base + size_t(r) * dst.stride + c) = *reinterpret_cast<const uint4*>(&src(r, c));
    });
}
}  // namespace tk
