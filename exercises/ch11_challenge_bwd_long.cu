// GENERATED from solutions/ch11_challenge_bwd_long/ch11_challenge_bwd_long.cu by `python -m tklab exercises`: fill in the TODOs.
// Chapter 11 challenge ch11_challenge_bwd_long: one backward step of attention for one head over a long
// sequence (causal, d = 128), as fast as you can make it.
//
//   P = exp(scale Q K^T - L),  dV = P^T dO,  dS = P o (dO V^T - D),  dK = scale dS^T Q,  dQ = scale dS K
//   (causal: P = 0 where key > query; L the forward's natural log-sum-exp per query, D = rowsum(dO o O)).
//
// The shape the chapter did not tune: at the benchmark one head (B = H = 1) and N = 32768 causal tokens, so the
// parallelism comes from the sequence alone (512 key blocks of 64, a triangle of work). The file you start from is
// correct and deliberately plain; rewrite any part of it. The check holds dQ, dK and dV to the reference on fresh
// random inputs and, on a GPU, times your kernel against PyTorch's SDPA backward (cuDNN) in the same run: that
// ratio is your entry on the class leaderboard. Keep a work log (docs/WORKLOG_TEMPLATE.md).
// Every check also runs your kernel on the CPU emulator (on a GPU: one small case, for races and hazards), so use
// what it models: no cluster barriers, TMA multicast or fp8 (docs/ARCHITECTURE.md, "What it refuses").
//
// Given, and fixed by the check: Q, K, V, dO, dK, dV as [batch, heads, seq, 128] bf16, contiguous; L, D as [batch,
// heads, seq] fp32; dQ as [batch, heads, seq, 128] fp32, zeroed by the check before each launch (add into it);
// the launch -- grid (ceil(seq / 64), heads, batch): one block per 64 keys, 128 threads, 100 KiB of dynamic
// shared memory -- and the arguments below. Shapes: any seq, causal or not.
#include "tk.cuh"

using namespace tk;

extern "C" __global__ void __launch_bounds__(128)
attn_bwd(const bf16* q, const bf16* k, const bf16* v, const bf16* dout, const float* lse, const float* delta,
         float* dq, bf16* dk, bf16* dv, int heads, int seq, float scale, int causal) {
    // TODO: your code here (about 83 lines).
    // Goal: make it fast: the five products of each (key block, query block) pair on the tensor cores, each
    //       query block's tiles loaded once for the block's four warps
    // Stuck? tklab.hint("ch11_challenge_bwd_long") in a notebook, or python -m tklab hint ch11_challenge_bwd_long.
    // One thread per key (threads 64..127 idle): for every query that sees it, P and dS from scalar dot products;
    // dK and dV in local arrays, dQ added with atomics.
    const int key = blockIdx.x * 64 + threadIdx.x;
    if (threadIdx.x >= 64 || key >= seq) return;
    const size_t row_base = (size_t(blockIdx.z) * heads + blockIdx.y) * size_t(seq);
    const bf16* k_row = k + (row_base + key) * 128;
    const bf16* v_row = v + (row_base + key) * 128;
    float grad_k[128], grad_v[128];
    for (int e = 0; e < 128; ++e) grad_k[e] = grad_v[e] = 0.0f;
    for (int query = causal ? key : 0; query < seq; ++query) {
        const bf16* q_row = q + (row_base + query) * 128;
        const bf16* do_row = dout + (row_base + query) * 128;
        float score = 0.0f, dp = 0.0f;
        for (int e = 0; e < 128; ++e) {
            score += to_float(q_row[e]) * to_float(k_row[e]);
            dp += to_float(do_row[e]) * to_float(v_row[e]);
        }
        const float p = expf(score * scale - lse[row_base + query]);
        const float ds = p * (dp - delta[row_base + query]);
        for (int e = 0; e < 128; ++e) {
            grad_v[e] += p * to_float(do_row[e]);
            grad_k[e] += ds * to_float(q_row[e]);
            atomicAdd(&dq[(row_base + query) * 128 + e], scale * ds * to_float(k_row[e]));
        }
    }
    for (int e = 0; e < 128; ++e) {
        dk[(row_base + key) * 128 + e] = from_float<bf16>(scale * grad_k[e]);
        dv[(row_base + key) * 128 + e] = from_float<bf16>(grad_v[e]);
    }
}
