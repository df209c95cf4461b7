// GENERATED from solutions/ch08_wgmma/ch08_wgmma.cu by `python -m tklab exercises`: fill in the TODOs.
// Chapter 08, step 1 (and the exercise ch08_wgmma): a Hopper GEMM with TMA and wgmma, one warpgroup.
//
//   C (M x N) = A (M x K, bf16, row-major) * B (K x N, bf16, row-major), fp32 accumulation.
//
// One block of 128 threads -- one warpgroup -- computes a 64 x 256 tile of C. Its K loop walks a ring
// of STAGES shared-memory stages, each holding a 64 x 64 slice of A and a 64 x 256 slice of B that TMA
// brought in and announced on the stage's mbarrier. For every slice the warpgroup waits for its stage,
// issues one wgmma group (four m64n256k16 instructions) into its fp32 accumulator and waits for it;
// then one elected lane refills the stage with the slice STAGES steps ahead. No warp specialisation yet:
// the same threads copy and compute, so the tensor cores idle while the warpgroup waits and issues.
// Shapes: M a multiple of 64, N of 256, K of 64 (tklab.gemm checks them before launching).
// Launch: grid (N / 256, M / 64), 128 threads, gemm_shared_bytes of dynamic shared memory.
#include "tk.cuh"

using namespace tk;

#ifndef STAGES
#define STAGES 4
#endif
#ifndef C_TYPE
#define C_TYPE bf16  // C's element type (the exercise's check reads it as float)
#endif

constexpr int BM = 64, BN = 256, BK = 64;  // block tile; K-slice per stage
using a_tile = st_bf<BM, BK>;              // 64 x 64: 128-byte rows, 128B swizzle, one TMA box
using b_tile = st_bf<BK, BN>;              // 64 x 256: four 64 x 64 panels, 128B swizzle
struct stage {
    a_tile a;
    b_tile b;
};
/// What the launch must ask for (read by tklab.gemm from the compiled module: one source of truth).
extern "C" __device__ int gemm_shared_bytes = dynamic_shared_bytes<stage[STAGES]>();

extern "C" __global__ void __launch_bounds__(warpgroup::THREADS)
gemm(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, C_TYPE* c, int M, int N,
     int K) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    stage(&stages)[STAGES] = alloc.take<stage[STAGES]>();
    __shared__ mbarrier full[STAGES];  // phase completes when a stage's bytes have landed

    const coord tile{int(blockIdx.y), int(blockIdx.x)};
    const int k_tiles = K / BK;
    const bool leader = warpgroup::warp() == 0 && warpgroup::elect_one();  // one lane issues every copy
    auto fetch = [&](int slot, int k) {  // slice k of A and B into stage `slot`
        tma::expect(full[slot], stages[slot].a, stages[slot].b);
        tma::load_async(stages[slot].a, map_a, full[slot], {tile.r, k});
        tma::load_async(stages[slot].b, map_b, full[slot], {k, tile.c});
    };
    if (leader) {
        init_full_barriers(full, 1);  // one arrival (the expect) per phase; no empty barriers: see __syncthreads below
        for (int s = 0; s < STAGES && s < k_tiles; ++s) fetch(s, s);
    }
    __syncthreads();

    rt_fl<16, BN> acc;  // this warp's 16 rows of the warpgroup's 64 x 256
    ring_cursor<STAGES> at;
    for (int k = 0; k < k_tiles; ++k, at.advance()) {
        stage& s = stages[at.stage];
        wait(full[at.stage], at.phase);
        // TODO: your code here (about 2 lines).
        // Goal: this stage's contribution to acc on the tensor cores (the first slice must not add to what
        //       the registers held before), finished before the stage is handed back
        // Stuck? tklab.hint("ch08_wgmma") in a notebook, or python -m tklab hint ch08_wgmma.
        __syncthreads();  // every warp's products have read the stage: it may be refilled
        if (leader && k + STAGES < k_tiles) fetch(at.stage, k + STAGES);
    }
    // TODO: your code here (about 1 line).
    // Goal: the warpgroup's 64 x 256 result, written to its tile of C
}
