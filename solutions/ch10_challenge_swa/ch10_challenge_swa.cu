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
    // BEGIN SOLUTION hint: make it fast: visit only the key blocks inside the block's windows, on the tensor cores, with the next block's copy in flight while this one is multiplied
    // Four warps of 16 query rows; key/value blocks of 64 through a two-stage cp.async ring; S and O on mma.sync.
    // The block's rows r0 .. r0 + 63 see keys r0 - window + 1 .. r0 + 63, so only those key blocks are visited.
    constexpr int SWA_D = 128, SWA_ROWS = 16, SWA_WARPS = 4, SWA_KEYS = 64;
    struct swa_smem {
        st_bf<SWA_ROWS, SWA_D> rows_of_q[SWA_WARPS];  // each warp's queries, later its outputs
        st_bf<SWA_KEYS, SWA_D> key_buf[2], val_buf[2];
    };

    extern __shared__ char swa_pool[];
    shared_allocator carve(swa_pool);
    swa_smem& sb = carve.take<swa_smem>();
    const int wq = warpid(), block_row0 = blockIdx.x * SWA_ROWS * SWA_WARPS;
    const int my_row0 = block_row0 + wq * SWA_ROWS;
    const size_t this_head = (size_t(blockIdx.z) * heads + blockIdx.y) * size_t(seq);
    const gl<const bf16> gq(q + this_head * SWA_D, seq, SWA_D), gk(k + this_head * SWA_D, seq, SWA_D),
        gv(v + this_head * SWA_D, seq, SWA_D);
    const int first_blk = max(block_row0 - window + 1, 0) / SWA_KEYS;
    const int end_blk = min(block_row0 + SWA_ROWS * SWA_WARPS - 1, seq - 1) / SWA_KEYS + 1;
    const float c2 = scale * 1.4426950408889634f;  // scores in base 2

    load_async_bounded(sb.rows_of_q[wq], gq, {int(blockIdx.x) * SWA_WARPS + wq, 0});
    load_async_bounded<SWA_WARPS>(sb.key_buf[0], gk, {first_blk, 0});
    load_async_bounded<SWA_WARPS>(sb.val_buf[0], gv, {first_blk, 0});
    cp_async_commit();

    rt_fl<SWA_ROWS, SWA_KEYS> sc;
    rt_bf<SWA_ROWS, SWA_KEYS> pr;
    rt_fl<SWA_ROWS, SWA_D> o_acc;
    col_vec<decltype(sc)> run_max, prev_max, base, run_sum, blk_sum;
    fill(run_max, neg_inf);
    zero(run_sum);
    zero(o_acc);
    for (int blk = first_blk; blk < end_blk; ++blk) {
        const int buf = (blk - first_blk) & 1;
        cp_async_wait<0>();
        __syncthreads();  // block blk is in for everyone; everyone is done with the other buffer
        if (blk + 1 < end_blk) {
            load_async_bounded<SWA_WARPS>(sb.key_buf[buf ^ 1], gk, {blk + 1, 0});
            load_async_bounded<SWA_WARPS>(sb.val_buf[buf ^ 1], gv, {blk + 1, 0});
            cp_async_commit();
        }
        zero(sc);
        mma_ABt(sc, sb.rows_of_q[wq], sb.key_buf[buf], sc);
        const int key0 = blk * SWA_KEYS;
        if (key0 + SWA_KEYS - 1 > my_row0 || key0 <= my_row0 + SWA_ROWS - 1 - window)
            mask_if(sc, my_row0, key0, [window](int row, int key) { return key > row || key <= row - window; },
                    neg_inf);
        if (key0 + SWA_KEYS > seq) mask_keys_from(sc, key0, seq);
        copy(prev_max, run_max);
        row_max(run_max, sc, run_max);
        map(base, run_max, [](float mx) { return mx == neg_inf ? 0.0f : mx; });  // a row that saw no key yet
        map(prev_max, prev_max, base, [c2](float old, float b) { return fast::exp2(c2 * (old - b)); });
        map_row(sc, sc, base, [c2](float x, float b) { return fast::exp2(c2 * x - c2 * b); });
        row_sum(blk_sum, sc);
        map(run_sum, run_sum, prev_max, blk_sum, [](float s, float f, float add) { return f * s + add; });
        mul_row(o_acc, o_acc, prev_max);
        copy(pr, sc);
        mma_AB(o_acc, pr, sb.val_buf[buf], o_acc);
    }
    div_row(o_acc, o_acc, run_sum);
    rt_bf<SWA_ROWS, SWA_D> o_out;
    copy(o_out, o_acc);
    store(sb.rows_of_q[wq], o_out);
    __syncwarp();
    store_bounded(gl<bf16>(o + this_head * SWA_D, seq, SWA_D), sb.rows_of_q[wq], {int(blockIdx.x) * SWA_WARPS + wq, 0});
    map(run_sum, run_sum, run_max, [c2](float s, float mx) { return (fast::log2(s) + c2 * mx) * 0.6931471805599453f; });
    if (my_row0 < seq) store(lse + this_head + my_row0, run_sum, seq - my_row0);
    // STUB: // One thread per query row (threads 64..127 idle): a scalar dot product per key of its window, an online
    // STUB: // softmax, the output row in a local array.
    // STUB: const int row = blockIdx.x * 64 + threadIdx.x;
    // STUB: if (threadIdx.x >= 64 || row >= seq) return;
    // STUB: const size_t head_rows = (size_t(blockIdx.z) * heads + blockIdx.y) * size_t(seq);
    // STUB: const bf16* q_row = q + (head_rows + row) * 128;
    // STUB: float out_row[128];
    // STUB: for (int e = 0; e < 128; ++e) out_row[e] = 0.0f;
    // STUB: float best = -__int_as_float(0x7f800000), total = 0.0f;  // -infinity
    // STUB: for (int key = max(row - window + 1, 0); key <= row; ++key) {
    // STUB:     const bf16* k_row = k + (head_rows + key) * 128;
    // STUB:     const bf16* v_row = v + (head_rows + key) * 128;
    // STUB:     float dot = 0.0f;
    // STUB:     for (int e = 0; e < 128; ++e) dot += to_float(q_row[e]) * to_float(k_row[e]);
    // STUB:     const float score = dot * scale, new_best = fmaxf(best, score);
    // STUB:     const float shrink = expf(best - new_best), weight = expf(score - new_best);
    // STUB:     for (int e = 0; e < 128; ++e) out_row[e] = out_row[e] * shrink + weight * to_float(v_row[e]);
    // STUB:     total = total * shrink + weight;
    // STUB:     best = new_best;
    // STUB: }
    // STUB: for (int e = 0; e < 128; ++e) o[(head_rows + row) * 128 + e] = from_float<bf16>(out_row[e] / total);
    // STUB: lse[head_rows + row] = best + logf(total);
    // END SOLUTION
}
