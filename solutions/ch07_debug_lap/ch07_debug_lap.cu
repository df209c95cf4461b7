// Chapter 07, debug exercise ch07_debug_lap: a ring copy that passes a small matrix and fails a large one.
//
// Chapter 07's TMA ring, as a copy: one block per SM walks the matrix tile by tile (t = blockIdx.x,
// + gridDim.x, ...) through a ring of STAGES shared-memory stages. The producer warp (one lane) waits until a
// stage is free, announces its bytes and starts the TMA load; the four consumer warps wait until the stage is
// full, read it into registers, hand it back and write the registers out. Here the consumers keep their place
// in the ring by hand -- `slot` (which stage) and `lap` (the parity of the phase they wait for) -- instead of
// the library's ring_cursor, which the producer uses.
//
// The tensor map: ROWS x 64 float tiles (tklab.tma.tensor_map(src, (ROWS, 64), swizzle=0)); cols a multiple of
// 4. Launch: 32 * (1 + CONSUMER_WARPS) threads, ring_shared_bytes of dynamic shared memory.
#include "tk.cuh"

using namespace tk;

#ifndef STAGES
#define STAGES 2
#endif
constexpr int ROWS = 64, CONSUMER_WARPS = 4;
using tile = st<float, ROWS, 64, swizzle_none>;  // row-major, the whole tile one TMA box
constexpr int PER_LANE = ROWS * 64 / 4 / (CONSUMER_WARPS * WARP_THREADS);  // float4 each consumer lane moves
/// The dynamic shared memory a launch must ask for.
extern "C" __device__ int ring_shared_bytes = dynamic_shared_bytes<tile[STAGES]>();

extern "C" __global__ void __launch_bounds__(WARP_THREADS * (1 + CONSUMER_WARPS))
ring_lap(const __grid_constant__ CUtensorMap map_src, float* dst, int rows, int cols) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    tile(&buf)[STAGES] = alloc.take<tile[STAGES]>();
    __shared__ pipeline<STAGES> pipe;
    const int tiles_c = (cols + 63) / 64, tiles = (rows + ROWS - 1) / ROWS * tiles_c;

    if (threadIdx.x == 0) pipe.init(CONSUMER_WARPS);  // a stage is free once every consumer warp has read it
    __syncthreads();

    if (warpid() == 0) {  // ---- producer: one lane ----
        if (laneid() == 0) {
            ring_cursor<STAGES> put;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x, put.advance()) {
                wait(pipe.empty[put.stage], put.phase ^ 1);  // free? (the first lap: at once)
                tma::expect(pipe.full[put.stage], buf[put.stage]);
                tma::load_async(buf[put.stage], map_src, pipe.full[put.stage], {t / tiles_c, t % tiles_c});
            }
        }
        return;
    }

    // ---- consumers ----
    const int lane = threadIdx.x - WARP_THREADS;  // 0 .. 127 across the consumer warps
    int slot = 0;       // the stage the next tile is in
    uint32_t lap = 0;   // the parity of the full barrier's phase that tile completes
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        wait(pipe.full[slot], lap);
        float4 v[PER_LANE];
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) v[i] = reinterpret_cast<const float4*>(buf[slot].data)[lane + i * 128];
        __syncwarp();
        pipe.release(slot);  // read: the producer may refill it while we write
        const int r0 = t / tiles_c * ROWS, c0 = t % tiles_c * 64;
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) {
            const int e = 4 * (lane + i * 128), r = r0 + e / 64, c = c0 + e % 64;
            if (r < rows && c < cols) *reinterpret_cast<float4*>(dst + size_t(r) * cols + c) = v[i];
        }
        // BEGIN BUG hint: dst = src for any M and any N that is a multiple of 4, every tile through a ring of TMA-filled stages
        if (++slot == STAGES) {  // the ring wraps: the next lap waits for the other parity
            slot = 0;
            lap ^= 1;
        }
        // BUG: if (++slot == STAGES) slot = 0;  // the next tile is in the next stage; the ring wraps to 0
        // END BUG
    }
}
