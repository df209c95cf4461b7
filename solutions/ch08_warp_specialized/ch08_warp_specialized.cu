// Chapter 08, design exercise ch08_warp_specialized: the warp-specialised GEMM, written from the picture.
//
//   C (M x N) = A (M x K, bf16, row-major) * B (K x N, bf16, row-major), fp32 accumulation.
//
// Section 1's block, which the exercise ch08_wgmma did not have: one block computes a 128 x 256 tile of C
// with three warpgroups sharing a ring of STAGES stages (each: the two 64 x 64 halves of A's K-slice, one
// per consumer, and the 64 x 256 slice of B):
//   * warpgroup 0, the PRODUCER, gives most of its registers away; one elected lane fills the stages with
//     TMA, waiting for each to be free first;
//   * warpgroups 1 and 2, the CONSUMERS, take the registers the producer gave up; each owns 64 rows of
//     the tile: it waits for a stage, multiplies its half of A by B into its accumulator with wgmma, hands
//     the stage back once no product of its own can still read it, and finally writes its 64 rows.
// Shapes: M a multiple of 128, N of 256, K of 64. Launch: grid (M / 128 * N / 256), 384 threads,
// gemm_shared_bytes of dynamic shared memory.
#include "tk.cuh"

using namespace tk;

constexpr int BM = 128, BN = 256, BK = 64;  // block tile; K-slice per stage
constexpr int CONSUMERS = 2;                // consumer warpgroups, 64 rows of the tile each
constexpr int STAGES = 4;
constexpr int GROUP_M = 16;                 // block order: 16 row-tiles share B columns in L2
#ifndef C_TYPE
#define C_TYPE bf16  // C's element type (the exercise's check reads it as float)
#endif
// The registers each warpgroup keeps: setmaxnreg moves them from the producer to the consumers.
// BEGIN SOLUTION hint: a register split that gives the consumers as many registers as the block's launch pool allows (168 per thread x 384 threads = 64,512, not the SM's 65,536) beside a small producer (in multiples of 8)
using split = warpgroup::register_split<40, 232, CONSUMERS>;  // producer 40, consumers 232 registers
// STUB: using split = warpgroup::register_split<168, 168, CONSUMERS>;
// END SOLUTION

using a_tile = st_bf<BM / CONSUMERS, BK>;  // 64 x 64: 128-byte rows, 128B swizzle, one TMA box each
using b_tile = st_bf<BK, BN>;              // 64 x 256: four 64 x 64 panels, 128B swizzle
struct stage {
    a_tile a[CONSUMERS];
    b_tile b;
};
/// What the launch must ask for.
extern "C" __device__ int gemm_shared_bytes = dynamic_shared_bytes<stage[STAGES]>();

extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * warpgroup::THREADS, 1)
gemm(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, C_TYPE* c,
     int M, int N, int K) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    stage(&stages)[STAGES] = alloc.take<stage[STAGES]>();
    __shared__ pipeline<STAGES> pipe;

    const coord tile = tile_order{M / BM, N / BN, GROUP_M}(blockIdx.x);
    const int k_tiles = K / BK;
    if (threadIdx.x == 0) pipe.init(CONSUMERS * warpgroup::WARPS);
    __syncthreads();

    if (warpgroup::groupid() == 0) {  // ---- producer ----
        split::producer();
        if (warpgroup::warp() == 0 && warpgroup::elect_one()) {
            ring_cursor<STAGES> at;
            for (int k = 0; k < k_tiles; ++k, at.advance()) {
                stage& s = stages[at.stage];
                // BEGIN SOLUTION hint: K-slice k into this stage: once it is free, announce all the bytes its tiles will bring, then load each consumer's half of A and the slice of B (A and B are tiled 64 x 64 and 64 x 256)
                wait(pipe.empty[at.stage], at.phase ^ 1);
                tma::expect(pipe.full[at.stage], s.a[0], s.a[1], s.b);  // the bytes these three tiles bring
                for (int w = 0; w < CONSUMERS; ++w)
                    tma::load_async(s.a[w], map_a, pipe.full[at.stage], {tile.r * CONSUMERS + w, k});
                tma::load_async(s.b, map_b, pipe.full[at.stage], {k, tile.c});
                // END SOLUTION
            }
        }
    } else {  // ---- consumers ----
        split::consumer();
        // Which consumer: the same in every lane, and __shfl_sync lets the compiler see that, so the
        // tile addresses and wgmma descriptors stay in uniform registers.
        const int me = __shfl_sync(0xffffffff, warpgroup::groupid() - 1, 0);
        rt_fl<16, BN> acc;  // this warp's 16 rows of the warpgroup's 64 x 256
        ring_cursor<STAGES> at;
        for (int k = 0; k < k_tiles; ++k, at.advance()) {
            // BEGIN SOLUTION hint: wait for the stage, one wgmma group of your half of A times B into acc (overwrite on the first slice), and hand the stage back as soon as no product of yours can read it
            wait(pipe.full[at.stage], at.phase);
            warpgroup::mma_AB(acc, stages[at.stage].a[me], stages[at.stage].b, k > 0);  // = on k == 0, += after
            warpgroup::mma_async_wait<0>();  // the group is done: its stage goes back to the producer
            pipe.release(at.stage);
            // END SOLUTION
        }
        warpgroup::mma_async_wait<0>();  // no product of ours is still running ...
        wgmma::fence_operands(acc);      // ... and acc's reads stay below that wait
        warpgroup::store(gl<C_TYPE>(c, M, N), acc, {tile.r * CONSUMERS + me, tile.c});
    }
}
