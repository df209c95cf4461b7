// GENERATED from solutions/ch10_challenge_swa/ch10_challenge_swa.cu by `python -m tklab exercises`: fill in the TODOs.
// Chapter 10 challenge ch10_challenge_swa: sliding-window attention at d = 128, as fast as you can make it.
//
//   O = softmax(Q K^T * scale + mask) V  per (batch, head);  L = log-sum-exp (natural log) of each masked row.
//   Query i sees keys i - window + 1 .. i: causal, and blind to the past beyond the window (Mistral-style).
//
// At the benchmark (B = 2, H = 16, N = 8192, window = 1024) a query sees at most 1024 keys: an eighth of the
// causal square. A kernel that visits only the key blocks inside the window does ~1/4 of a causal kernel's work;
// one that walks every block and masks does it all. The file you start from is correct and deliberately plain;
// rewrite any part of it. The check holds your O and L to the reference on fresh random inputs and, on a GPU,
// times your kernel against PyTorch's SDPA given the window as a mask, in the same run: that ratio is your entry
// on the class leaderboard. Keep a work log (docs/WORKLOG_TEMPLATE.md).
// Every check also runs your kernel on the CPU emulator (on a GPU: one small case, for races and hazards), so use
// what it models: no cluster barriers, TMA multicast or fp8 (docs/ARCHITECTURE.md, "What it refuses").
//
// Given, and fixed by the check: Q, K, V, O as [batch, heads, seq, 128] bf16, contiguous; L as [batch, heads,
// seq] fp32; the launch -- grid (ceil(seq / 64), heads, batch): one block per 64 query rows, 128 threads, 100 KiB
// of dynamic shared memory -- and the arguments below. Shapes: any seq, any window >= 1.
#include "tk.cuh"

using namespace tk;

extern "C" __global__ void __launch_bounds__(128)
flash_swa(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int heads, int seq, int window,
          float scale) {
    // TODO: your code here (about 62 lines).
    // Goal: make it fast: visit only the key blocks inside the block's windows, on the tensor cores, with
    //       the next block's copy in flight while this one is multiplied
    // Stuck? tklab.hint("ch10_challenge_swa") in a notebook, or python -m tklab hint ch10_challenge_swa.
    // One thread per query row (threads 64..127 idle): a scalar dot product per key of its window, an online
    // softmax, the output row in a local array.
    const int row = blockIdx.x * 64 + threadIdx.x;
    if (threadIdx.x >= 64 || row >= seq) return;
    const size_t head_rows = (size_t(blockIdx.z) * heads + blockIdx.y) * size_t(seq);
    const bf16* q_row = q + (head_rows + row) * 128;
    float out_row[128];
    for (int e = 0; e < 128; ++e) out_row[e] = 0.0f;
    float best = -__int_as_float(0x7f800000), total = 0.0f;  // -infinity
    for (int key = max(row - window + 1, 0); key <= row; ++key) {
        const bf16* k_row = k + (head_rows + key) * 128;
        const bf16* v_row = v + (head_rows + key) * 128;
        float dot = 0.0f;
        for (int e = 0; e < 128; ++e) dot += to_float(q_row[e]) * to_float(k_row[e]);
        const float score = dot * scale, new_best = fmaxf(best, score);
        const float shrink = expf(best - new_best), weight = expf(score - new_best);
        for (int e = 0; e < 128; ++e) out_row[e] = out_row[e] * shrink + weight * to_float(v_row[e]);
        total = total * shrink + weight;
        best = new_best;
    }
    for (int e = 0; e < 128; ++e) o[(head_rows + row) * 128 + e] = from_float<bf16>(out_row[e] / total);
    lse[head_rows + row] = best + logf(total);
}
