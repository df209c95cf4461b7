// Chapter 08, step 2: a Hopper GEMM with TMA, wgmma and warp specialisation.
//
//   C (M x N, bf16) = A (M x K, bf16, row-major) * B (K x N, bf16, row-major), fp32 accumulation.
//
// One block computes a 128 x 256 tile of C with three warpgroups:
//   * warpgroup 0 (producer) gives most of its registers away and has ONE elected lane issue TMA copies
//     of the next K-slices of A and B into a ring of STAGES shared-memory stages;
//   * warpgroups 1 and 2 (consumers) each own 64 rows of the tile: they wait for a stage to be full,
//     run wgmma on it (64 x 256 x 64 per stage), hand the stage back, and finally write their rows.
// The ring keeps STAGES-1 loads in flight while the tensor cores work, and while one consumer waits
// the other one's products keep the tensor cores busy.
// Shapes must be multiples of the tile (128, 256, 64); tklab.gemm checks that.
#include "tk.cuh"

using namespace tk;

constexpr int BM = 128, BN = 256, BK = 64;  // block tile; K-slice per stage
constexpr int CONSUMERS = 2;                // consumer warpgroups, 64 rows of the tile each
constexpr int STAGES = 4;
constexpr int GROUP_M = 16;                 // block order: 16 row-tiles share B columns in L2
// wgmma groups a consumer leaves running while it waits for the next stage. 1 overlaps a little more
// but holds every stage one step longer; measured equal to 0 on the H200 (bench/notes/gemm_wgmma.md).
#ifndef IN_FLIGHT
#define IN_FLIGHT 0
#endif
using split = warpgroup::register_split<40, 232, CONSUMERS>;  // producer 40, consumers 232 registers

using a_tile = st_bf<BM / CONSUMERS, BK>;  // 64 x 64: 128-byte rows, 128B swizzle, one TMA box each
using b_tile = st_bf<BK, BN>;              // 64 x 256: four 64 x 64 panels, 128B swizzle
struct stage {
    a_tile a[CONSUMERS];
    b_tile b;
};
/// What the launch must ask for (read by tklab.gemm from the compiled module: one source of truth).
extern "C" __device__ int gemm_shared_bytes = dynamic_shared_bytes<stage[STAGES]>();

extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * warpgroup::THREADS, 1)
gemm(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, bf16* c,
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
                wait(pipe.empty[at.stage], at.phase ^ 1);
                tma::expect(pipe.full[at.stage], s.a[0], s.a[1], s.b);  // the bytes these three tiles bring
                for (int w = 0; w < CONSUMERS; ++w)
                    tma::load_async(s.a[w], map_a, pipe.full[at.stage], {tile.r * CONSUMERS + w, k});
                tma::load_async(s.b, map_b, pipe.full[at.stage], {k, tile.c});
            }
        }
    } else {  // ---- consumers ----
        split::consumer();
        // Which consumer: the same in every lane, and __shfl_sync lets the compiler see that, so the
        // tile addresses and wgmma descriptors stay in uniform registers.
        const int me = __shfl_sync(0xffffffff, warpgroup::groupid() - 1, 0);
        rt_fl<16, BN> acc;  // this warp's 16 rows of the warpgroup's 64 x 256
        ring_cursor<STAGES> at, reading;  // reading: the oldest stage our wgmmas may still read
        for (int k = 0; k < k_tiles; ++k, at.advance()) {
            wait(pipe.full[at.stage], at.phase);
            warpgroup::mma_AB(acc, stages[at.stage].a[me], stages[at.stage].b, k > 0);  // = on k == 0, += after
            warpgroup::mma_async_wait<IN_FLIGHT>();  // all but the newest IN_FLIGHT groups are done,
            if (k >= IN_FLIGHT) {                     // so the stage they read goes back to the producer
                pipe.release(reading.stage);
                reading.advance();
            }
        }
        warpgroup::mma_async_wait<0>(acc);
        warpgroup::store(gl<bf16>(c, M, N), acc, {tile.r * CONSUMERS + me, tile.c});
    }
}
