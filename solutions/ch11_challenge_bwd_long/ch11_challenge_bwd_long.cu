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
    // BEGIN SOLUTION hint: make it fast: the five products of each (key block, query block) pair on the tensor cores, each query block's tiles loaded once for the block's four warps
    // Four warps of 16 keys each walk the query blocks of 64 their keys can see; the block loads each query block's
    // Q and dO (and its L and D) once for all four. P^T, dP^T and dS^T are 16 x 64 per warp (keys x queries); dV and dK
    // stay in registers; dS goes through shared memory, transposed, for dQ's product, which is added into dQ.
    constexpr int BW_D = 128, BW_KEYS = 16, BW_WARPS = 4, BW_Q = 64;
    struct bw_smem {
        st_bf<BW_KEYS, BW_D> my_keys[BW_WARPS], my_vals[BW_WARPS];  // each warp's 16 keys and values
        st_bf<BW_KEYS * BW_WARPS, BW_D> all_keys;                   // the block's 64 keys: dQ's B operand
        st_bf<BW_Q, BW_D> q_blk, do_blk;                            // this query block
        st_bf<BW_KEYS, BW_KEYS * BW_WARPS> ds_rows[BW_WARPS];  // dS by 16 query rows x the block's 64 keys
        float l_blk[BW_Q], d_blk[BW_Q];
    };

    extern __shared__ char bwd_pool[];
    shared_allocator carve(bwd_pool);
    bw_smem& sb = carve.take<bw_smem>();
    const int wk = warpid(), key_blk = blockIdx.x, my_key0 = key_blk * BW_KEYS * BW_WARPS + wk * BW_KEYS;
    const size_t head_base = (size_t(blockIdx.z) * heads + blockIdx.y) * size_t(seq);
    const gl<const bf16> gq(q + head_base * BW_D, seq, BW_D), gk(k + head_base * BW_D, seq, BW_D),
        gv(v + head_base * BW_D, seq, BW_D), gdo(dout + head_base * BW_D, seq, BW_D);
    const float c2 = scale * 1.4426950408889634f;

    load_async_bounded(sb.my_keys[wk], gk, {key_blk * BW_WARPS + wk, 0});
    load_async_bounded(sb.my_vals[wk], gv, {key_blk * BW_WARPS + wk, 0});
    load_async_bounded<BW_WARPS>(sb.all_keys, gk, {key_blk, 0});
    cp_async_commit();

    rt_fl<BW_KEYS, BW_Q> pt, dpt;  // P^T and dP^T (then dS^T): this warp's keys x the block's queries
    rt_bf<BW_KEYS, BW_Q> pt16;
    rt_fl<BW_KEYS, BW_D> dv_acc, dk_acc;
    rt_fl<BW_KEYS, BW_D> dq_part;  // 16 query rows of dS K
    row_vec<decltype(pt)> l2_cols, d_cols;
    zero(dv_acc);
    zero(dk_acc);
    const int q_first = causal ? key_blk : 0, q_end = (seq + BW_Q - 1) / BW_Q;
    for (int qb = q_first; qb < q_end; ++qb) {
        __syncthreads();  // every warp is done with the previous query block's tiles
        load_async_bounded<BW_WARPS>(sb.q_blk, gq, {qb, 0});
        load_async_bounded<BW_WARPS>(sb.do_blk, gdo, {qb, 0});
        cp_async_commit();
        for (int i = threadIdx.x; i < BW_Q; i += blockDim.x) {
            const int query = qb * BW_Q + i;
            sb.l_blk[i] = query < seq ? lse[head_base + query] * 1.4426950408889634f : 0.0f;  // in base 2
            sb.d_blk[i] = query < seq ? delta[head_base + query] : 0.0f;
        }
        cp_async_wait<0>();
        __syncthreads();
        load(l2_cols, sb.l_blk);
        load(d_cols, sb.d_blk);
        const int query0 = qb * BW_Q;

        zero(pt);
        mma_ABt(pt, sb.my_keys[wk], sb.q_blk, pt);  // S^T
        map_col(pt, pt, l2_cols, [c2](float x, float l2) { return fast::exp2(c2 * x - l2); });
        if (causal || query0 + BW_Q > seq)
            mask_if(pt, my_key0, query0, [causal, seq](int key, int query) {
                return query >= seq || (causal && key > query);
            }, 0.0f);
        copy(pt16, pt);
        mma_AB(dv_acc, pt16, sb.do_blk, dv_acc);  // dV += P^T dO

        zero(dpt);
        mma_ABt(dpt, sb.my_vals[wk], sb.do_blk, dpt);  // dP^T = V dO^T
        map_col(dpt, dpt, d_cols, [](float x, float dd) { return x - dd; });
        map(dpt, dpt, pt, [](float dp_minus_d, float p) { return p * dp_minus_d; });  // dS^T
        copy(pt16, dpt);
        mma_AB(dk_acc, pt16, sb.q_blk, dk_acc);  // dK += dS^T Q (scaled at the end)

        // dS (queries x keys) into shared memory, transposed element by element: warp w's keys are columns
        // 16w .. 16w + 15 of every 16-row slab.
        for_each_pair(pt16, [&](const bf16_2& two, rc at, rc e0, rc e1) {
            const int query_a = at.c + e0.c, query_b = at.c + e1.c, key_a = at.r + e0.r, key_b = at.r + e1.r;
            sb.ds_rows[query_a / BW_KEYS](query_a % BW_KEYS, wk * BW_KEYS + key_a) = two.x;
            sb.ds_rows[query_b / BW_KEYS](query_b % BW_KEYS, wk * BW_KEYS + key_b) = two.y;
        });
        __syncthreads();
        zero(dq_part);
        mma_AB(dq_part, sb.ds_rows[wk], sb.all_keys, dq_part);  // 16 query rows of dS K
        const int my_q0 = query0 + wk * BW_KEYS;
        for_each_pair(dq_part, [&](const float2& two, rc at, rc e0, rc e1) {
            const int qa = my_q0 + at.r + e0.r, qb2 = my_q0 + at.r + e1.r;
            if (qa < seq) atomicAdd(&dq[(head_base + qa) * BW_D + at.c + e0.c], scale * two.x);
            if (qb2 < seq) atomicAdd(&dq[(head_base + qb2) * BW_D + at.c + e1.c], scale * two.y);
        });
    }
    __syncthreads();  // the query tiles are free: they stage dK and dV on the way out
    map(dk_acc, dk_acc, [scale](float x) { return scale * x; });
    rt_bf<BW_KEYS, BW_D> out16;
    copy(out16, dk_acc);
    store(sb.my_keys[wk], out16);
    copy(out16, dv_acc);
    store(sb.my_vals[wk], out16);
    __syncwarp();
    store_bounded(gl<bf16>(dk + head_base * BW_D, seq, BW_D), sb.my_keys[wk], {key_blk * BW_WARPS + wk, 0});
    store_bounded(gl<bf16>(dv + head_base * BW_D, seq, BW_D), sb.my_vals[wk], {key_blk * BW_WARPS + wk, 0});
    // STUB: // One thread per key (threads 64..127 idle): for every query that sees it, P and dS from scalar dot products;
    // STUB: // dK and dV in local arrays, dQ added with atomics.
    // STUB: const int key = blockIdx.x * 64 + threadIdx.x;
    // STUB: if (threadIdx.x >= 64 || key >= seq) return;
    // STUB: const size_t row_base = (size_t(blockIdx.z) * heads + blockIdx.y) * size_t(seq);
    // STUB: const bf16* k_row = k + (row_base + key) * 128;
    // STUB: const bf16* v_row = v + (row_base + key) * 128;
    // STUB: float grad_k[128], grad_v[128];
    // STUB: for (int e = 0; e < 128; ++e) grad_k[e] = grad_v[e] = 0.0f;
    // STUB: for (int query = causal ? key : 0; query < seq; ++query) {
    // STUB:     const bf16* q_row = q + (row_base + query) * 128;
    // STUB:     const bf16* do_row = dout + (row_base + query) * 128;
    // STUB:     float score = 0.0f, dp = 0.0f;
    // STUB:     for (int e = 0; e < 128; ++e) {
    // STUB:         score += to_float(q_row[e]) * to_float(k_row[e]);
    // STUB:         dp += to_float(do_row[e]) * to_float(v_row[e]);
    // STUB:     }
    // STUB:     const float p = expf(score * scale - lse[row_base + query]);
    // STUB:     const float ds = p * (dp - delta[row_base + query]);
    // STUB:     for (int e = 0; e < 128; ++e) {
    // STUB:         grad_v[e] += p * to_float(do_row[e]);
    // STUB:         grad_k[e] += ds * to_float(q_row[e]);
    // STUB:         atomicAdd(&dq[(row_base + query) * 128 + e], scale * ds * to_float(k_row[e]));
    // STUB:     }
    // STUB: }
    // STUB: for (int e = 0; e < 128; ++e) {
    // STUB:     dk[(row_base + key) * 128 + e] = from_float<bf16>(scale * grad_k[e]);
    // STUB:     dv[(row_base + key) * 128 + e] = from_float<bf16>(grad_v[e]);
    // STUB: }
    // END SOLUTION
}
