// GENERATED from solutions/ch10_debug_turns/ch10_debug_turns.cu by `python -m tklab exercises`.
// DEBUGGING EXERCISE: this program has one bug. Check it as it is (tklab.check("ch10_debug_turns")
// or python -m tklab check ch10_debug_turns), read what the verdict says it did, then find the bug
// and repair it.
// What it should do: C = A B (bf16 in, fp32 accumulation), the two consumers' products taking turns on the tensor
//                    cores
// Stuck? tklab.hint("ch10_debug_turns") in a notebook, or python -m tklab hint ch10_debug_turns.
// Chapter 10, debug exercise ch10_debug_turns: two consumer warpgroups taking turns on the tensor cores.
//
//   C (M x N) = A (M x K, bf16, row-major) * B (K x N, bf16, row-major), fp32 accumulation.
//
// Chapter 10's ping-pong, in a GEMM small enough to read whole: chapter 08's warp-specialised block (a
// producer warpgroup filling a ring of STAGES stages with TMA; two consumer warpgroups, 64 rows of the block's
// 128 x 256 tile each), where the consumers take turns issuing their products. Section 3's named barriers make
// the turns (warpgroup::turns): a consumer waits on its own barrier until the other hands it the turn, issues
// its wgmma group, and passes the turn on; turn::start hands the first turn to consumer 0, and the block's
// very last turn is not passed (pass_last), so no arrival is left pending when the block exits. The
// emulator counts every wgmma a warpgroup issues while it does not hold its turn.
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
constexpr int FIRST_TURN = 1;  // named barriers FIRST_TURN .. FIRST_TURN + CONSUMERS - 1 (0 is __syncthreads)
using turn = warpgroup::turns<FIRST_TURN, CONSUMERS>;
/// The turn barriers, [turn_barriers, epilogue_barriers): what the emulator reads to count wgmma outside a turn.
extern "C" __device__ int turn_barriers = FIRST_TURN, epilogue_barriers = FIRST_TURN + CONSUMERS;

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
    if (threadIdx.x == 0) pipe.init(CONSUMERS * warpgroup::WARPS);
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
    } else {  // ---- consumers, taking turns ----
        split::consumer();
        const int me = __shfl_sync(0xffffffff, warpgroup::groupid() - 1, 0);
        rt_fl<16, BN> acc;  // this warp's 16 rows of the warpgroup's 64 x 256
        turn::start(me);    // consumer 0 takes the first turn
        ring_cursor<STAGES> next;
        auto issue = [&](int k) {  // step k's products: our 64 rows of A's slice times B's, = on the first slice
            warpgroup::mma_AB(acc, ring[next.stage].a[me], ring[next.stage].b, k > 0);
        };
        for (int k = 0; k < k_tiles; ++k, next.advance()) {
            wait(pipe.full[next.stage], next.phase);
            turn::wait(me);  // our turn: the other consumer's products are issued
            turn::pass(me, k + 1 == k_tiles);  // hand the turn on (the block's last turn: to nobody)
            issue(k);
            warpgroup::mma_async_wait<0>();  // the group is done: its stage goes back to the producer
            pipe.release(next.stage);
        }
        wgmma::fence_operands(acc);  // acc's reads stay below the last wait
        warpgroup::store(gl<C_TYPE>(c, M, N), acc, {tile.r * CONSUMERS + me, tile.c});
    }
}
