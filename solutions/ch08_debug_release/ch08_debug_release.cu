// Chapter 08, debug exercise ch08_debug_release: a warp-specialised GEMM that keeps one wgmma group in flight.
//
//   C (M x N) = A (M x K, bf16, row-major) * B (K x N, bf16, row-major), fp32 accumulation.
//
// Chapter 08's step 2 (solutions/gemm_wgmma.cu) with IN_FLIGHT = 1: one block computes a 128 x 256 tile of C
// with three warpgroups sharing a ring of STAGES stages. The producer's elected lane fills the stages with TMA;
// each consumer warpgroup waits for a stage, issues one wgmma group on it, and waits with mma_async_wait<1>,
// which leaves the newest group running while the next stage is awaited. A stage goes back to the producer
// (pipe.release) once no product of this consumer can still read it.
//
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
using split = warpgroup::register_split<24, 240, CONSUMERS>;  // producer 24, consumers 240 registers

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
    stage(&ring)[STAGES] = alloc.take<stage[STAGES]>();
    __shared__ pipeline<STAGES> pipe;

    const coord tile = tile_order{M / BM, N / BN, GROUP_M}(blockIdx.x);
    const int k_tiles = K / BK;
    if (threadIdx.x == 0) pipe.init(CONSUMERS * warpgroup::WARPS);  // every consumer warp hands a stage back
    __syncthreads();

    if (warpgroup::groupid() == 0) {  // ---- producer ----
        split::producer();
        if (warpgroup::warp() == 0 && warpgroup::elect_one()) {
            ring_cursor<STAGES> put;
            for (int k = 0; k < k_tiles; ++k, put.advance()) {
                stage& s = ring[put.stage];
                wait(pipe.empty[put.stage], put.phase ^ 1);
                tma::expect(pipe.full[put.stage], s.a[0], s.a[1], s.b);
                for (int half = 0; half < CONSUMERS; ++half)  // each consumer's 64 rows of A
                    tma::load_async(s.a[half], map_a, pipe.full[put.stage], {tile.r * CONSUMERS + half, k});
                tma::load_async(s.b, map_b, pipe.full[put.stage], {k, tile.c});
            }
        }
    } else {  // ---- consumers ----
        split::consumer();
        const int me = __shfl_sync(0xffffffff, warpgroup::groupid() - 1, 0);
        rt_fl<16, BN> acc;  // this warp's 16 rows of the warpgroup's 64 x 256
        ring_cursor<STAGES> next;  // the stage this step reads
        for (int k = 0; k < k_tiles; ++k, next.advance()) {
            wait(pipe.full[next.stage], next.phase);
            warpgroup::mma_AB(acc, ring[next.stage].a[me], ring[next.stage].b, k > 0);
            warpgroup::mma_async_wait<1>();  // every group but the newest is done
            // BEGIN BUG hint: C = A B (bf16 in, fp32 accumulation), each consumer keeping one wgmma group in flight
            if (k >= 1) pipe.release((next.stage + STAGES - 1) % STAGES);  // step k - 1's group is done
            // BUG: pipe.release(next.stage);  // this step's products are issued: the producer may refill the stage
            // END BUG
        }
        warpgroup::mma_async_wait<0>();  // no product of ours is still running ...
        wgmma::fence_operands(acc);      // ... and acc's reads stay below that wait
        warpgroup::store(gl<C_TYPE>(c, M, N), acc, {tile.r * CONSUMERS + me, tile.c});
    }
}
