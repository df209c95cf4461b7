// GENERATED from solutions/ch07_ring_protocol/ch07_ring_protocol.cu by `python -m tklab exercises`: fill in the TODOs.
// Chapter 07, design exercise ch07_ring_protocol: the ring's protocol written from bare mbarriers.
//
// The same copy as ch07_tma_ring -- one block per SM walks the matrix tile by tile (t = blockIdx.x,
// + gridDim.x, ...) through a ring of STAGES shared-memory stages -- without the library's pipeline<> and
// ring_cursor: the barriers, their counts, the stage and parity of every step, the producer's side and
// the consumers' hand-back are yours.
//   * each stage has a `full` barrier (the tile has landed) and an `empty` barrier (every consumer warp
//     has read it), initialised once by one thread before the block's first __syncthreads();
//   * the PRODUCER warp has one lane issue the TMA loads: for its i-th tile it waits until stage
//     i % STAGES is free, announces the bytes on the stage's `full` barrier and starts the copy;
//   * the CONSUMER warps wait until the stage is full (the parity of their lap), read it into registers,
//     hand it back, then write the registers out (skipping elements past the end of the matrix).
// The tensor map is built for ROWS x 64 tiles (tklab.tma.tensor_map(src, (ROWS, 64), swizzle=0)); cols
// must be a multiple of 4. Launch: 32 * (1 + CONSUMER_WARPS) threads, ring_shared_bytes dynamic shared.
// Only the pieces the protocol is built from -- tiles, the shared allocator, mbarriers, TMA -- not the tk.cuh
// umbrella, which also brings the library's own packaging of a ring (tests/test_answers_nowhere.py says why).
#include "tk/common/common.cuh"
#include "tk/types/types.cuh"
#include "tk/hopper/mbarrier.cuh"
#include "tk/hopper/tma.cuh"

using namespace tk;

#ifndef STAGES
#define STAGES 2
#endif
#ifndef ROWS
#define ROWS 64  // tile rows: one stage holds ROWS x 64 floats
#endif
constexpr int CONSUMER_WARPS = 4;
using tile = st<float, ROWS, 64, swizzle_none>;
constexpr int PER_LANE = ROWS * 64 / 4 / (CONSUMER_WARPS * WARP_THREADS);  // float4 each consumer lane moves
/// The dynamic shared memory a launch must ask for.
extern "C" __device__ int ring_shared_bytes = dynamic_shared_bytes<tile[STAGES]>();

extern "C" __global__ void __launch_bounds__(WARP_THREADS * (1 + CONSUMER_WARPS))
ring_protocol(const __grid_constant__ CUtensorMap map_src, float* dst, int rows, int cols) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    tile(&stage)[STAGES] = alloc.take<tile[STAGES]>();
    __shared__ mbarrier full[STAGES], empty[STAGES];
    const int tiles_c = (cols + 63) / 64, tiles = (rows + ROWS - 1) / ROWS * tiles_c;

    if (threadIdx.x == 0) {
        // TODO: your code here (about 5 lines).
        // Goal: give every stage's two barriers the number of arrivals that completes a phase, then make the
        //       initialisation visible to the async proxy
        // Stuck? tklab.hint("ch07_ring_protocol") in a notebook, or python -m tklab hint ch07_ring_protocol.
    }
    __syncthreads();

    if (warpid() == 0) {  // ---- producer: one lane ----
        if (laneid() == 0) {
            int i = 0;  // how many tiles this producer has issued: the i-th goes to stage i % STAGES, lap i / STAGES
            for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++i) {
                // TODO: your code here (about 4 lines).
                // Goal: wait until the stage is free (which parity on a lap where it was never filled?),
                //       announce its bytes, start the load of tile (t / tiles_c, t % tiles_c)
            }
        }
        return;
    }

    // ---- consumers ----
    const int lane = threadIdx.x - WARP_THREADS;  // 0 .. 127 across the consumer warps
    int i = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++i) {
        const int s = i % STAGES;
        // TODO: your code here (about 1 line).
        // Goal: wait until this step's tile has landed in its stage (the parity of which phase, on this
        //       lap?)
        float4 v[PER_LANE];
#pragma unroll
        for (int k = 0; k < PER_LANE; ++k) v[k] = reinterpret_cast<const float4*>(stage[s].data)[lane + k * 128];
        // TODO: your code here (about 2 lines).
        // Goal: hand the stage back: once per warp, and only after every lane of the warp has read it
        const int r0 = t / tiles_c * ROWS, c0 = t % tiles_c * 64;
#pragma unroll
        for (int k = 0; k < PER_LANE; ++k) {
            const int e = 4 * (lane + k * 128), r = r0 + e / 64, c = c0 + e % 64;
            if (r < rows && c < cols) *reinterpret_cast<float4*>(dst + size_t(r) * cols + c) = v[k];
        }
    }
}
