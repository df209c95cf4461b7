// Chapter 06 solution: a tensor-core GEMM with warp-level mma.sync, written with the tk tile library.
//
//   C (M x N, bf16) = A (M x K, bf16, row-major) . B (K x N, bf16, row-major), fp32 accumulation.
//
// Each block computes a BM x BN tile of C; its WARPS_M x WARPS_N warps each own a WM x WN piece held as an
// fp32 register tile. The K loop streams BM x BK slices of A and BK x BN slices of B through a ring of
// STAGES shared-memory buffers with cp.async, so the copies for step k + STAGES - 1 run while the tensor
// cores work on step k. From shared memory, ldmatrix fills the A operand (row tile) and ldmatrix.trans
// the B operand (col tile); swizzled shared tiles keep both conflict-free.
//
// Shapes: M % BM == 0, N % BN == 0, K % BK == 0 (no bounds checks).
// Launch: grid (N / BN, M / BM), block 32 * WARPS_M * WARPS_N threads,
//         shared_mem = gemm_shared_bytes = STAGES * (BM * BK + BK * BN) * 2 + 1024 bytes (the 1024: alignment slack).
#include "tk.cuh"
using namespace tk;

#ifndef GEMM_BM  // bench/gemm_mma.py times variants by overriding all six with -DGEMM_...=
#define GEMM_BM 128
#define GEMM_BN 128
#define GEMM_BK 32
#define GEMM_WARPS_M 2
#define GEMM_WARPS_N 2
#define GEMM_STAGES 3
#endif
constexpr int BM = GEMM_BM, BN = GEMM_BN, BK = GEMM_BK;  // block tile, and the K slice per pipeline stage
constexpr int WARPS_M = GEMM_WARPS_M, WARPS_N = GEMM_WARPS_N, STAGES = GEMM_STAGES;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, WARPS = WARPS_M * WARPS_N;  // one warp's piece of C

using a_slice = st_bf<BM, BK>;  // BK = 32: 64-byte rows, 64B swizzle
using b_slice = st_bf<BK, BN>;  // BN = 128: two 64-column panels, 128B swizzle
/// What the launch must ask for (tklab.gemm.launch_facts reads it from the compiled module).
extern "C" __device__ int gemm_shared_bytes = dynamic_shared_bytes<a_slice[STAGES], b_slice[STAGES]>();

extern "C" __global__ void __launch_bounds__(WARPS * 32)
gemm_mma_tiles(const bf16* A_ptr, const bf16* B_ptr, bf16* C_ptr, int M, int N, int K) {
    const gl<const bf16> A(A_ptr, M, K), B(B_ptr, K, N);
    const gl<bf16> C(C_ptr, M, N);

    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    auto& a_s = alloc.take<a_slice, STAGES>();
    auto& b_s = alloc.take<b_slice, STAGES>();

    const int warp_m = warpid() / WARPS_N, warp_n = warpid() % WARPS_N;
    const int block_m = blockIdx.y, block_n = blockIdx.x, k_steps = K / BK;

    rt_fl<WM, WN> acc;
    rt_bf<WM, 16> a;       // A operand for one k16 step
    rt_bf<16, WN, col> b;  // B operand, col layout (from ldmatrix.trans)
    zero(acc);

    // Prologue: start the first STAGES - 1 slices; one commit group per k step.
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < k_steps) {
            load_async<WARPS>(a_s[s], A, {block_m, s});
            load_async<WARPS>(b_s[s], B, {s, block_n});
        }
        cp_async_commit();
    }

    for (int k = 0; k < k_steps; k++) {
        // Slice k has landed (at most STAGES - 2 later groups still in flight), and after the barrier
        // every warp is done with slice k - 1, whose buffer the next copy reuses.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int next = k + STAGES - 1;
        if (next < k_steps) {
            load_async<WARPS>(a_s[next % STAGES], A, {block_m, next});
            load_async<WARPS>(b_s[next % STAGES], B, {next, block_n});
        }
        cp_async_commit();  // possibly empty: keeps "one group per step" true at the tail

        const auto& a_k = a_s[k % STAGES];
        const auto& b_k = b_s[k % STAGES];
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            load(a, a_k, {warp_m, kk});
            load(b, b_k, {kk, warp_n});
            mma_AB(acc, a, b, acc);
        }
    }

    rt_bf<WM, WN> out;
    copy(out, acc);  // fp32 -> bf16, register-local (same fragment layout)
    store(C, out, {block_m * WARPS_M + warp_m, block_n * WARPS_N + warp_n});
}
