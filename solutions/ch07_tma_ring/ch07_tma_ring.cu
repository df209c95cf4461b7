// Chapter 07 (and the exercise ch07_tma_ring): a copy through a ring of STAGES shared-memory stages.
//
// One block per SM walks the matrix tile by tile (tile t = blockIdx.x, + gridDim.x, ...):
//   * the PRODUCER warp has one lane issue TMA loads: for each tile it waits until the tile's stage is
//     free, announces the bytes on the stage's `full` mbarrier and starts the copy;
//   * the CONSUMER warps wait until a stage is full, read it into registers, hand the stage back on its
//     `empty` mbarrier (it is free as soon as they have read it), then write the registers out with
//     ordinary 16-byte stores, skipping elements past the end of the matrix.
// With one stage, loading and draining take turns; with more, STAGES - 1 loads are in flight while the
// consumers drain a stage: bytes in flight per SM = what a stage holds x stages in use.
// The tensor map is built for ROWS x 64 tiles (tklab.tma.tensor_map(src, (ROWS, 64), swizzle=0)); TMA
// fills the part of a tile past the end of the matrix with zeros. cols must be a multiple of 4.
// Launch: 32 * (1 + CONSUMER_WARPS) threads, STAGES * ROWS * 256 + 1024 bytes of dynamic shared memory.
#include "tk.cuh"

using namespace tk;

#ifndef STAGES
#define STAGES 2
#endif
#ifndef ROWS
#define ROWS 64  // tile rows: one stage holds ROWS x 64 floats = ROWS / 4 KB
#endif
constexpr int CONSUMER_WARPS = 4;
using tile = st<float, ROWS, 64, swizzle_none>;  // plain row-major (TMA box = the whole tile)
constexpr int PER_LANE = ROWS * 64 / 4 / (CONSUMER_WARPS * WARP_THREADS);  // float4 each consumer lane moves
/// The dynamic shared memory a launch must ask for (tklab.tma_copy reads it from the compiled module).
extern "C" __device__ int ring_shared_bytes = dynamic_shared_bytes<tile[STAGES]>();

extern "C" __global__ void __launch_bounds__(WARP_THREADS * (1 + CONSUMER_WARPS))
ring_copy(const __grid_constant__ CUtensorMap map_src, float* dst, int rows, int cols) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    tile(&stage)[STAGES] = alloc.take<tile[STAGES]>();
    __shared__ pipeline<STAGES> pipe;
    const int tiles_c = (cols + 63) / 64, tiles = (rows + ROWS - 1) / ROWS * tiles_c;

    if (threadIdx.x == 0) pipe.init(CONSUMER_WARPS);  // a stage is free again once every consumer warp has read it
    __syncthreads();
    ring_cursor<STAGES> at;

    if (warpid() == 0) {  // ---- producer: one lane ----
        if (warpgroup::elect_one()) {
            for (int t = blockIdx.x; t < tiles; t += gridDim.x, at.advance()) {
                wait(pipe.empty[at.stage], at.phase ^ 1);  // the stage is free (a fresh barrier: at once)
                // BEGIN SOLUTION hint: fill this stage with tile t: its full barrier must know how many bytes to wait for, and the copy must land in the stage and report to that barrier
                tma::expect(pipe.full[at.stage], stage[at.stage]);
                tma::load_async(stage[at.stage], map_src, pipe.full[at.stage], {t / tiles_c, t % tiles_c});
                // STUB: arrive(pipe.full[at.stage]);  // a stand-in that loads nothing: replace it
                // END SOLUTION
            }
        }
        return;
    }

    // ---- consumers ----
    const int lane = threadIdx.x - WARP_THREADS;  // 0 .. 127 across the consumer warps
    for (int t = blockIdx.x; t < tiles; t += gridDim.x, at.advance()) {
        // BEGIN SOLUTION hint: wait until this stage's tile has landed (which phase parity of the full barrier?)
        wait(pipe.full[at.stage], at.phase);
        // END SOLUTION
        float4 v[PER_LANE];
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) v[i] = reinterpret_cast<const float4*>(stage[at.stage].data)[lane + i * 128];
        __syncwarp();
        pipe.release(at.stage);  // read: the producer may refill it while we write
        const int r0 = t / tiles_c * ROWS, c0 = t % tiles_c * 64;
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) {
            const int e = 4 * (lane + i * 128), r = r0 + e / 64, c = c0 + e % 64;
            if (r < rows && c < cols) *reinterpret_cast<float4*>(dst + size_t(r) * cols + c) = v[i];
        }
    }
}
