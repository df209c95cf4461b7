// Chapter 07: copying a float matrix three ways -- what each way costs the threads, and what it reaches.
//
//   copy_per_thread  every thread loads 16 bytes into registers and stores them (a grid-stride loop):
//                    the classic copy; each thread computes its addresses and holds the data.
//   copy_cp_async    each block stages a ROWS x 64 tile in shared memory with cp.async (every thread
//                    issues 16-byte copies that skip the registers), waits, and stores it from there.
//   copy_tma         one thread of each block hands the copy engine a tensor map and a tile coordinate;
//                    TMA brings the whole tile into shared memory and reports the bytes to an mbarrier,
//                    then one TMA store sends it back out. The other threads do nothing at all.
// Shapes: rows a multiple of ROWS, cols a multiple of 64 (the chapter's benchmark sizes); the ring in
// ch07_tma_ring.cu shows the bounds handling TMA gives for free.
#include "tk.cuh"

using namespace tk;

#ifndef ROWS
#define ROWS 64  // tile rows: a ROWS x 64 float tile is ROWS / 4 KB
#endif
using tile = st<float, ROWS, 64, swizzle_none>;  // plain row-major: nothing here reads it column-wise

/// 1. Per thread: 16 bytes in, 16 bytes out, n4 = number of float4 in the matrix.
extern "C" __global__ void copy_per_thread(const float4* src, float4* dst, long long n4) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

/// 2. cp.async into shared memory, then ordinary 16-byte stores out. One tile per block, 4 warps.
extern "C" __global__ void __launch_bounds__(128) copy_cp_async(const float* src, float* dst, int rows, int cols) {
    __shared__ tile t;
    const coord at{int(blockIdx.y), int(blockIdx.x)};
    load_async<4>(t, gl<const float>(src, rows, cols), at);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    store<4>(gl<float>(dst, rows, cols), t, at);
}

/// 3. TMA in, TMA out: one thread does everything; the warp's other lanes only make up the block.
extern "C" __global__ void __launch_bounds__(32) copy_tma(const __grid_constant__ CUtensorMap map_src,
                                                          const __grid_constant__ CUtensorMap map_dst) {
    __shared__ tile t;
    __shared__ mbarrier landed;
    const coord at{int(blockIdx.y), int(blockIdx.x)};
    if (threadIdx.x == 0) {
        init_mbarrier(landed, 1);
        fence_mbarrier_init();
        tma::expect(landed, t);  // this phase completes when the tile's bytes are in
        tma::load_async(t, map_src, landed, at);
        wait(landed, 0);
        tma::store_async(map_dst, t, at);  // the copy engine reads shared memory and writes global
        tma::store_commit();
        tma::store_wait_read<0>();  // t must stay until the store has read it
    }
}
