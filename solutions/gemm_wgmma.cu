// Chapter 08 solution: a Hopper GEMM with TMA, wgmma and warp specialisation.
//
//   C (M x N, bf16) = A (M x K, bf16, row-major) * B (K x N, bf16, row-major), fp32 accumulation.
//
// One block computes a 128 x 256 tile of C with three warpgroups:
//   * warpgroup 0 (producer) gives most of its registers away and has ONE thread issue TMA copies of
//     the next K-slices of A and B into a ring of STAGES shared-memory stages;
//   * warpgroups 1 and 2 (consumers) each own 64 rows of the tile: they wait for a stage to be full,
//     run wgmma on it (64 x 256 x 64 per stage), hand the stage back, and finally write their rows.
// The ring keeps STAGES-1 loads in flight while the tensor cores work, so neither side waits long.
// Shapes must be multiples of the tile (128, 256, 64); the Python side checks that.
#include "tk.cuh"

using namespace tk;

constexpr int BM = 128, BN = 256, BK = 64;  // block tile; K-slice per stage
constexpr int CONSUMERS = 2;                // consumer warpgroups, 64 rows of the tile each
constexpr int STAGES = 4;
constexpr int GROUP_M = 16;                 // block order: 16 row-tiles share B columns in L2
// wgmma groups a consumer leaves running while it waits for the next stage. 1 overlaps a little more
// but holds every stage one step longer; it measured no faster (the other consumer warpgroup already
// keeps the tensor cores busy: bench/notes/gemm_wgmma.md).
#ifndef IN_FLIGHT
#define IN_FLIGHT 0
#endif

using a_tile = st_bf<BM / CONSUMERS, BK>;  // 64 x 64: 128-byte rows, 128B swizzle, one TMA box each
using b_tile = st_bf<BK, BN>;              // 64 x 256: four 64 x 64 panels, 128B swizzle
struct stage {
    a_tile a[CONSUMERS];
    b_tile b;
};
constexpr uint32_t STAGE_BYTES = CONSUMERS * tma::bytes<a_tile> + tma::bytes<b_tile>;  // TMA brings these
// launch with STAGES * sizeof(stage) + 1024 bytes of dynamic shared memory (alignment slack)

/// Block b's tile (row, column): blocks walk GROUP_M tile-rows at a time, so the B columns one wave
/// reads stay in L2 while several row tiles use them.
__device__ inline coord tile_of(int b, int tiles_m, int tiles_n) {
    const int per_group = GROUP_M * tiles_n, first = (b / per_group) * GROUP_M;
    const int height = min(tiles_m - first, GROUP_M);
    return {first + (b % per_group) % height, (b % per_group) / height};
}

extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * warpgroup::THREADS, 1)
gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b, bf16* c,
     int M, int N, int K) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    stage(&stages)[STAGES] = alloc.take<stage, STAGES>();
    __shared__ pipeline<STAGES> pipe;

    const coord tile = tile_of(blockIdx.x, M / BM, N / BN);
    const int k_tiles = K / BK;
    if (threadIdx.x == 0) pipe.init(CONSUMERS * warpgroup::WARPS);
    __syncthreads();

    if (warpgroup::groupid() == 0) {  // ---- producer ----
        warpgroup::decrease_registers<40>();
        if (threadIdx.x == 0) {
            ring_cursor<STAGES> at;
            for (int k = 0; k < k_tiles; ++k, at.advance()) {
                stage& s = stages[at.stage];
                wait(pipe.empty[at.stage], at.phase ^ 1);
                arrive_expect_bytes(pipe.full[at.stage], STAGE_BYTES);
                for (int w = 0; w < CONSUMERS; ++w)
                    tma::load_async(s.a[w], tmap_a, pipe.full[at.stage], {tile.r * CONSUMERS + w, k});
                tma::load_async(s.b, tmap_b, pipe.full[at.stage], {k, tile.c});
            }
        }
    } else {  // ---- consumers ----
        warpgroup::increase_registers<232>();
        const int me = warpgroup::groupid() - 1;
        rt_fl<16, BN> acc;  // this warp's 16 rows of the warpgroup's 64 x 256
        zero(acc);
        ring_cursor<STAGES> at, reading;  // reading: the oldest stage our wgmmas may still read
        for (int k = 0; k < k_tiles; ++k, at.advance()) {
            wait(pipe.full[at.stage], at.phase);
            warpgroup::mma_AB(acc, stages[at.stage].a[me], stages[at.stage].b);
            warpgroup::mma_async_wait<IN_FLIGHT>();  // all but the newest IN_FLIGHT groups are done,
            if (k >= IN_FLIGHT) {                     // so the stage they read goes back to the producer
                pipe.release(reading.stage);
                reading.advance();
            }
        }
        warpgroup::mma_async_wait<0>();
        warpgroup::store(gl<bf16>(c, M, N), acc, {tile.r * CONSUMERS + me, tile.c});
    }
}
