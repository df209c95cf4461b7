// GENERATED from solutions/ch08_challenge_gemm_skinny/ch08_challenge_gemm_skinny.cu by `python -m tklab exercises`: fill in the TODOs.
// Chapter 08 challenge ch08_challenge_gemm_skinny: a skinny GEMM, as fast as you can make it.
//
//   C (M x N, fp32) = A (M x K, bf16, row-major) * B (K x N, bf16, row-major), fp32 accumulation.
//
// The shape the chapter never tuned: few rows (M = 64 at the benchmark: a batch of 64 tokens through an
// 8192 x 8192 layer), many columns. 2 M N K = 8.6 GFLOP against 128 MiB of B: the tensor cores could finish
// in ~12 us, HBM needs ~28 us just to stream B once, so this problem is bound by memory, not by FLOPs.
// The file you start from is correct and deliberately plain; rewrite any part of it. The check holds your
// output to A B on fresh random inputs, and on a GPU times it against cuBLAS in the same run: the ratio
// cuBLAS time / yours is your entry on the class leaderboard. Keep a work log (docs/WORKLOG_TEMPLATE.md).
// Every check also runs your kernel on the CPU emulator (on a GPU: one small case, for races and hazards), so use
// what it models: no cluster barriers, TMA multicast or fp8 (docs/ARCHITECTURE.md, "What it refuses").
//
// Given, and fixed by the check: the launch -- grid (N / 64, M / 64): one block per 64 x 64 tile of C,
// 128 threads (one warpgroup), 226 KiB of dynamic shared memory (sm_90's opt-in less 1 KiB for __shared__ variables) --
// and the arguments: TMA maps of A and B with 64 x 64 boxes (128-byte swizzle), the raw pointers too.
// Shapes: M, N and K multiples of 64.
#include "tk.cuh"

using namespace tk;

extern "C" __global__ void __launch_bounds__(128)
gemm_skinny(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, const bf16* a,
            const bf16* b, float* c, int M, int N, int K) {
    // TODO: your code here (about 34 lines).
    // Goal: make it fast: the K loop of your tile on the tensor cores, fed by a deep TMA ring that keeps HBM
    //       busy while the products run
    // Stuck? tklab.hint("ch08_challenge_gemm_skinny") in a notebook, or python -m tklab hint ch08_challenge_gemm_skinny.
    // One thread per column of the tile and 32 of its rows: plain loads from global memory, fp32 FMAs.
    const int my_col = blockIdx.x * 64 + threadIdx.x % 64;
    const int my_row0 = blockIdx.y * 64 + threadIdx.x / 64 * 32;
    float sums[32];
    for (int i = 0; i < 32; ++i) sums[i] = 0.0f;
    for (int kk = 0; kk < K; ++kk) {
        const float b_here = to_float(b[size_t(kk) * N + my_col]);
        for (int i = 0; i < 32; ++i) sums[i] += to_float(a[size_t(my_row0 + i) * K + kk]) * b_here;
    }
    for (int i = 0; i < 32; ++i) c[size_t(my_row0 + i) * N + my_col] = sums[i];
}

