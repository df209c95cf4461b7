// Chapter 11, debug exercise ch11_debug_fence: dV of attention's backward, in one warpgroup.
//
//   dV = P^T dO,   P = exp(scale * Q K^T - L)   per (batch, head), causal or not;
//   Q, K, dO: bf16 [batch * heads * seq, HEAD_DIM] (rows of one head after another); L: the forward's
//   log-sum-exp, fp32 [batch * heads * seq]; dV: fp32, Q's shape. seq a multiple of 64.
//
// The first of chapter 11's five products, alone: one block of one warpgroup owns 64 keys of one head. Its K
// stays in shared memory; Q and dO of every query block that sees those keys stream through a two-stage ring
// (one thread issues the TMA copies, as in chapter 08's first GEMM). Per query block each warp rebuilds its 16
// rows of P from S = Q K^T and L (section 1: P = 2^(c S - L log2 e), c = scale * log2(e)), zeroes the keys
// after its queries under a causal mask, and writes P to shared memory: dV += P^T dO reads P transposed, with
// the keys as rows, from there (the first of section 2's two ways; the chapter's kernel forms P^T in registers).
//
// Launch: grid (seq / 64, batch * heads), 128 threads, dv_shared_bytes of dynamic shared memory.
#include "tk.cuh"

using namespace tk;

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
constexpr int BR = 64, BC = 64, STAGES = 2;  // query rows per step, keys per block, stages of the ring
constexpr float LOG2E = 1.4426950408889634f;
using rows_tile = st_bf<BR, HEAD_DIM>;  // a query block's Q or dO
using keys_tile = st_bf<BC, HEAD_DIM>;  // the block's K
using prob_tile = st_bf<BR, BC>;        // P: queries x keys
struct smem_layout {
    keys_tile k;
    rows_tile q[STAGES], dout[STAGES];
    prob_tile p;
    mbarrier k_landed, landed[STAGES];
};
/// The dynamic shared memory a launch must ask for.
extern "C" __device__ int dv_shared_bytes = dynamic_shared_bytes<smem_layout>();

extern "C" __global__ void __launch_bounds__(warpgroup::THREADS)
attn_bwd_dv(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
            const __grid_constant__ CUtensorMap map_do, const float* lse, float* dv_out, int seq, float scale,
            int causal) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    smem_layout& sm = alloc.take<smem_layout>();
    const int kv = blockIdx.x, bh = blockIdx.y, blocks = seq / BR;  // this key block, head; blocks per head
    const int key0 = kv * BC, w = warpgroup::warp();
    const int q_first = causal ? kv : 0;  // (BR == BC) earlier query blocks see none of these keys
    const bool leader = threadIdx.x == 0;
    auto fetch = [&](int slot, int i) {  // Q and dO of query block i into stage `slot`
        tma::expect(sm.landed[slot], sm.q[slot], sm.dout[slot]);
        tma::load_async(sm.q[slot], map_q, sm.landed[slot], {bh * blocks + i, 0});
        tma::load_async(sm.dout[slot], map_do, sm.landed[slot], {bh * blocks + i, 0});
    };
    if (leader) {
        init_mbarrier(sm.k_landed, 1);
        for (int s = 0; s < STAGES; ++s) init_mbarrier(sm.landed[s], 1);
        fence_mbarrier_init();
        tma::expect(sm.k_landed, sm.k);
        tma::load_async(sm.k, map_k, sm.k_landed, {bh * blocks + kv, 0});
        for (int s = 0; s < STAGES && q_first + s < blocks; ++s) fetch(s, q_first + s);
    }
    __syncthreads();

    const float c = scale * LOG2E;
    rt_fl<16, HEAD_DIM> dv;  // this warp's 16 rows (keys) of the block's dV
    rt_fl<16, BC> s;         // this warp's 16 query rows of S, then of P
    col_vec<rt_fl<16, BC>> l2;  // L log2(e) of those rows (each lane holds rows g and g + 8)
    zero(dv);
    ring_cursor<STAGES> at;
    wait(sm.k_landed, 0);
    for (int i = q_first; i < blocks; ++i, at.advance()) {
        const int row0 = i * BR + 16 * w;  // this warp's first query row
        wait(sm.landed[at.stage], at.phase);
        warpgroup::mm_ABt(s, sm.q[at.stage], sm.k);  // S = Q K^T
        const float* l_rows = lse + size_t(bh) * seq + row0 + laneid() / 4;
        l2.data[0][0] = l_rows[0] * LOG2E;
        l2.data[0][1] = l_rows[8] * LOG2E;
        warpgroup::mma_async_wait<0>(s);
        map_row(s, s, l2, [c](float score, float lse2) { return fast::exp2(c * score - lse2); });  // P
        if (causal && key0 + BC - 1 > row0)  // the block crosses this warp's diagonal
            mask_if(s, row0, key0, [](int r, int key) { return key > r; }, 0.0f);
        warpgroup::store(sm.p, s);  // P in bf16, this warp's rows
        // BEGIN BUG hint: dV = P^T dO with P = exp(scale Q K^T - L), causal or not
        fence_proxy_async();  // our ordinary stores, then the async proxy (wgmma) reads them
        // END BUG
        __syncthreads();  // every warp's rows of P are in
        warpgroup::mma_AtB(dv, sm.p, sm.dout[at.stage]);  // dV += P^T dO: P read MN-major (transposed)
        warpgroup::mma_async_wait<0>(dv);
        __syncthreads();  // every warp's product has read P and the stage
        if (leader && i + STAGES < blocks) fetch(at.stage, i + STAGES);
    }
    warpgroup::store(gl<float>(dv_out, gridDim.y * seq, HEAD_DIM), dv, {bh * blocks + kv, 0});
}
