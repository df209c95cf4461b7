// Chapter 11, measured variants: dQ one step late (DQ_LAG=1; d = 128), and the consumers taking turns at the
// tensor cores (PINGPONG=1; d = 128 with DQ_LAG, or d = 64). Two consumers, DQ_MODE 1.
// tklab.kernels.attention_bwd appends this file to solutions/variants/ch11_bwd_rows.cu (the queries as rows), whose
// flash_bwd it renames (flash_bwd_chapter), so it reuses that file's tiles, constants, preprocess, last pass and
// helpers.
//
// Why: at d = 128 the chapter's kernel splits dQ's columns between its two consumers (DQ_SPLIT): consumer c
// forms columns [64c, 64c + 64) from BOTH consumers' dS. So both must have stored dS before either
// multiplies, and both must have multiplied before either overwrites it: two meetings a step, which keep
// the warpgroups in lockstep. They form P and dS at the same moments, and the tensor cores idle then (ncu at
// 0534402: each consumer stalled on its own wgmma 0.81 warps per issue, cuDNN's 0.10).
// Here query block i's dQ is formed in step i + 1. dS alternates between two buffers; per buffer and
// consumer, an mbarrier ds_full (each of its writer's 4 warps arrives once its rows are stored) and ds_free
// (the other consumer's 4 warps arrive once their dQ read it). Each consumer waits only on the other's
// PREVIOUS step, so the two may drift apart by up to a step: one's exponentials can run under the other's
// products.
// PINGPONG=1 makes the consumers take turns at the tensor cores (chapter 10's ping-pong): each step's two
// batches of products, (S, dP) then (dV, dK, dQ), are issued A, B, A, B, so while B issues, A forms P and
// dS, and the other way round: the drift is no longer left to chance. At d = 64 (no DQ_SPLIT: each consumer
// forms dQ from its own dS) the consumers never wait on each other's dS, and turns are all it takes.
// Measured on the H200 (bench/results/flash_bwd_2026-12-02_dd8f33f.md and _f21183e.md, 3 rounds against cuDNN):
// at d = 128 the lag alone 0.86-0.96x, lag and turns 0.93-1.03x, the chapter's kernel 0.89-1.01x in the same
// rounds, so lag and turns are attention_bwd's default there since 69085c9; at d = 64 turns 0.75-0.84x against
// the chapter's 0.75-0.85x: opt-in. Profile: bench/results/ncu_ch11_pingpong_2026-12-02.md.
#ifndef DQ_LAG
#define DQ_LAG 0
#endif
#ifndef PINGPONG
#define PINGPONG 0
#endif
static_assert(CONSUMERS == 2 && DQ_MODE == 1, "these variants take two consumers and DQ_MODE 1");
static_assert(DQ_LAG == DQ_SPLIT && (DQ_SPLIT || PINGPONG),
              "DQ_LAG=1 is how d = 128 (DQ_SPLIT) runs here; d = 64 comes for PINGPONG=1");

using lag_turn = warpgroup::turns<8, 2>;  // named barriers 8, 9 (the chapter's ranges: 1, 2-3, 5-6)
TK_BARRIERS_DISJOINT(lag_turn::ids, consumers_ids);
TK_BARRIERS_DISJOINT(lag_turn::ids, guard_ids);
TK_BARRIERS_DISJOINT(lag_turn::ids, store_ids);
/// Issue one batch of products: in turn under ping-pong (`last`: this consumer's final batch).
template <typename Issue>
__device__ inline void in_turn(int me, Issue issue, bool last = false) {
    if constexpr (PINGPONG) lag_turn::wait(me);
    issue();
    if constexpr (PINGPONG) {
        if (last) lag_turn::pass_last(me);
        else lag_turn::pass(me);
    }
}

struct lag_layout {
    kv_tile k[CONSUMERS], v[CONSUMERS];
    q_tile q[STAGES], dout[STAGES];
    p_tile p[CONSUMERS], ds[1 + DQ_LAG][CONSUMERS];  // ds[buffer][whose]
    dq_tile dq[CONSUMERS];
    pipeline<STAGES> q_pipe;
    mbarrier kv_full, ds_full[1 + DQ_LAG][CONSUMERS], ds_free[1 + DQ_LAG][CONSUMERS];
};
extern "C" __device__ int flash_bwd_shared_bytes = dynamic_shared_bytes<lag_layout>();

extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * 128, 1)
flash_bwd(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
          const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_do,
          const __grid_constant__ CUtensorMap map_dk, const __grid_constant__ CUtensorMap map_dv,
          const __grid_constant__ CUtensorMap map_dq, const float* lse, const float* delta, float* dq_acc,
          int heads, int seq, float scale, int causal) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    lag_layout& sm = alloc.take<lag_layout>();
    const int q_blocks = (seq + BR - 1) / BR;

    if (threadIdx.x == 0) {
        sm.q_pipe.init(CONSUMERS * warpgroup::WARPS);
        init_mbarrier(sm.kv_full, 1);
        for (int x = 0; x < 1 + DQ_LAG; ++x)
            for (int g = 0; g < CONSUMERS; ++g) {
                init_mbarrier(sm.ds_full[x][g], warpgroup::WARPS);
                init_mbarrier(sm.ds_free[x][g], warpgroup::WARPS);
            }
        fence_mbarrier_init();
    }
    // The first step forms the dQ of no block from buffer 1, before anyone wrote it: zeros, never sent.
    for (int x = threadIdx.x; DQ_LAG && x < CONSUMERS * BR * 64 / 2; x += blockDim.x)
        reinterpret_cast<uint32_t*>(&sm.ds[DQ_LAG][0])[x] = 0u;
    fence_proxy_async();
    __syncthreads();

    if (warpgroup::groupid() == 0) {  // ---- producer: the chapter's ----
        split::producer();
        produce(sm, map_q, map_k, map_v, map_do, heads, seq, causal);
        return;
    }

    split::consumer();
    const auto [kv, h, b] = coords(heads, seq);
    const int q_first = causal ? kv * KV_BLOCK / BR : 0;
    const int me = __shfl_sync(0xffffffffu, warpgroup::groupid() - 1, 0), other = 1 - me, w = warpgroup::warp();
    const int key0 = kv * KV_BLOCK + me * 64;
    const float c = scale * LOG2E;
    const size_t bh = size_t(b) * heads + h;
    const bool issuer = warpgroup::threadid() == 0;
    rt_fl<16, HEAD_DIM> dk, dv;
    zero(dk);
    zero(dv);
    rt_fl<16, 64> s, dp;
    rt_fl<16, DQ_COLS> dq;
    // DQ_LAG: dQ columns [64 me, 64 me + 64) of the block whose dS sits in buffer x, over both consumers'
    // keys; else this consumer's share over its own keys, every column.
    auto dq_from = [&](int x) {
        if constexpr (DQ_LAG) {
#pragma unroll
            for (int g = 0; g < CONSUMERS; ++g) warpgroup::mma_AB(dq, sm.ds[x][g], panel(sm.k[g], me), g > 0);
        } else {
            warpgroup::mm_AB(dq, sm.ds[0][me], sm.k[me]);
        }
    };
    auto send_dq = [&](int i) {  // (waited) registers -> shared memory -> one TMA reduce-add
        warpgroup::store(sm.dq[me], dq);
        fence_proxy_async();
        warpgroup::sync_group<STORE_BARRIERS>(me);
        if (issuer) {
            tma::store_add_async(map_dq, sm.dq[me], {b, h, i, DQ_LAG ? me : 0});
            tma::store_commit();
        }
    };
    auto last_dq = [&](int steps) {  // DQ_LAG: the last block's dQ, after the loop
        const int x = (steps - 1) & 1;
        wait(sm.ds_full[x][other], uint32_t((steps - 1) >> 1) & 1);
        if (issuer) tma::store_wait_read<0>();
        warpgroup::sync_group<GUARD_BARRIERS>(me);  // the issuer saw the last share leave sm.dq[me]
        in_turn(me, [&] { dq_from(x); }, true);
        warpgroup::mma_async_wait<0>(dq);
        send_dq(q_blocks - 1);
    };
    ring_cursor<STAGES> at;
    wait(sm.kv_full, 0);
    if constexpr (PINGPONG) lag_turn::start(me);
    if constexpr (PINGPONG) lag_turn::equal_steps(me, q_blocks - q_first);  // -DTK_DEBUG_TURNS: checked
    int j = 0;  // steps taken: buffer j % 2, its lap (j / 2) % 2
    for (int i = q_first; i < q_blocks; ++i, ++j, at.advance()) {
        const int x = DQ_LAG ? j & 1 : 0, row0 = i * BR + 16 * w;
        const uint32_t lap = (j >> 1) & 1;
        wait(sm.q_pipe.full[at.stage], at.phase);
        in_turn(me, [&] {
            warpgroup::mm_ABt(s, sm.q[at.stage], sm.k[me]);
            warpgroup::mm_ABt(dp, sm.dout[at.stage], sm.v[me]);
        });
        const row_values l2 = load_rows(lse + bh * seq, row0, seq, LOG2E, __int_as_float(0x7f800000));
        const row_values d = load_rows(delta + bh * seq, row0, seq, 1.0f, 0.0f);
        warpgroup::mma_async_wait<0>(s, dp);
        if (issuer) tma::store_wait_read<0>();

        map_row(s, s, l2, [c](float v_, float l) { return fast::exp2(c * v_ - l); });
        if (key0 + 63 >= seq || (causal && key0 + 63 > row0))
            mask_if(s, row0, key0, [seq, causal](int r, int k) { return k >= seq || (causal && k > r); }, 0.0f);
        sub_row(dp, dp, d);
        mul(dp, dp, s);
        warpgroup::sync_group<GUARD_BARRIERS>(me);  // my warps are past the last step's dV (it read p[me])
        // This buffer last held my dS of two steps ago: the other consumer's dQ has read it (buffer 1's
        // first wait is for the other's first, throwaway read; buffer 0's first passes at once).
        if constexpr (DQ_LAG) wait(sm.ds_free[x][me], lap ^ uint32_t(x ^ 1));
        warpgroup::store(sm.p[me], s);
        warpgroup::store(sm.ds[x][me], dp);
        fence_proxy_async();
        if constexpr (DQ_LAG) arrive_warp(sm.ds_full[x][me]);  // each warp, once its lanes stored
        warpgroup::sync_group<GUARD_BARRIERS>(me);

        in_turn(me, [&] {
            warpgroup::mma_AtB(dv, sm.p[me], sm.dout[at.stage]);  // dV += P^T dO
            warpgroup::mma_AtB(dk, sm.ds[x][me], sm.q[at.stage]);  // dK += dS^T Q
            if constexpr (DQ_LAG) wait(sm.ds_full[x ^ 1][other], uint32_t((j - 1) >> 1) & 1);  // its last dS
            dq_from(x ^ 1);  // DQ_LAG: the last block's dQ (the first step: zeros); else this block's
        }, !DQ_LAG && i + 1 == q_blocks);
        warpgroup::mma_async_wait<0>(dv, dk, dq);
        sm.q_pipe.release(at.stage);
        if constexpr (DQ_LAG) {
            if (laneid() == 0) arrive(sm.ds_free[x ^ 1][other]);
            if (j > 0) send_dq(i - 1);
        } else {
            send_dq(i);
        }
    }
    if constexpr (DQ_LAG) last_dq(j);

    // Epilogue, as the chapter's: dK, dV out through K and V's tiles once no wgmma reads them.
    mul(dk, dk, scale);
    warpgroup::named_barrier<CONSUMERS_BARRIER, CONSUMERS * warpgroup::THREADS>::sync();  // both dQ read K
    warpgroup::store(sm.k[me], dk);
    warpgroup::store(sm.v[me], dv);
    fence_proxy_async();
    warpgroup::sync_group<STORE_BARRIERS>(me);
    if (issuer) {
        tma::store_async(map_dk, sm.k[me], {b, h, kv * CONSUMERS + me, 0});
        tma::store_async(map_dv, sm.v[me], {b, h, kv * CONSUMERS + me, 0});
        tma::store_commit();
        tma::store_wait_read<0>();
    }
}
