// Chapter 10 solution: FlashAttention forward for Hopper -- TMA, wgmma, swizzled tiles, warp specialisation.
//
// The same algorithm as chapter 09 (online softmax over blocks of keys), with Hopper's engines:
//   * a PRODUCER warpgroup: one elected thread loads this block's Q once and streams K and V blocks into
//     a ring of STAGES swizzled shared tiles with TMA, each stage signalled by an mbarrier;
//   * CONSUMERS warpgroups, 64 query rows each: S = Q K^T with wgmma from shared memory, the softmax in
//     registers, O += P V with wgmma taking P straight from registers (the accumulator's layout IS the
//     A-operand layout, so P never touches shared memory).
// SCHEDULE picks how the consumers keep the tensor cores busy while the exponentials run (every step of
// chapter 10's progression is one value):
//   0  plain:    S_j, wait, softmax, O += P_j V_j, wait -- the tensor cores idle during each softmax.
//   1  overlap:  issue S_j and O += P_{j-1} V_{j-1} together, then do softmax_j while the second runs.
//   2  ping-pong: 1, and the consumer warpgroups take turns issuing (named barriers), so one's softmax
//                runs while the other's products do.
// Q, K, V, O: bf16 [batch, heads, seq, HEAD_DIM], any strides (rank-4 TMA maps: tiles past the end of a
// head read zeros and are not written back); L: fp32 [batch, heads, seq].
#include "tk.cuh"

using namespace tk;

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef CONSUMERS
#define CONSUMERS (HEAD_DIM == 128 ? 2 : 3)  // consumer warpgroups, 64 query rows each
#endif
#ifndef BC
#define BC 128  // keys per block
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef SCHEDULE
#define SCHEDULE 2
#endif
constexpr int BR = 64 * CONSUMERS;
using split = warpgroup::register_split<24, CONSUMERS == 2 ? 240 : 160, CONSUMERS>;
using turn = warpgroup::turns<1, CONSUMERS>;  // named barriers 1 .. CONSUMERS
using q_tile = st_bf<64, HEAD_DIM>;
using kv_tile = st_bf<BC, HEAD_DIM>;

struct smem_layout {
    q_tile q[CONSUMERS];  // each consumer's 64 query rows; its output rows at the end
    kv_tile k[STAGES], v[STAGES];
    pipeline<STAGES> k_pipe, v_pipe;
    mbarrier q_full;
};
/// The dynamic shared memory a launch must ask for (tklab.attention reads it from the compiled module).
extern "C" __device__ int flash_shared_bytes = dynamic_shared_bytes<smem_layout>();

/// One consumer warp's state: 16 query rows of S, P and O, and the per-row running max and sum.
struct softmax_state {
    rt_fl<16, BC> s;
    rt_bf<16, BC> p;
    rt_fl<16, HEAD_DIM> o;
    col_vec<rt_fl<16, BC>> m, l, a;  // a: this block's rescale factor 2^(c (m_old - m))

    /// S (scores of key block j) -> P = 2^(c S - c m) in s, with m, l and a updated; O not yet rescaled.
    __device__ void exponentiate(int j, int row0, int seq, float c, bool causal) {
        const int col0 = j * BC;
        if (causal && col0 + BC - 1 > row0) causal_mask(s, row0, col0);
        if (col0 + BC > seq) mask_keys_from(s, col0, seq);
        copy(a, m);
        row_max(m, s, m);
        map(a, a, m, [c](float mo, float mn) { return fast::exp2(c * (mo - mn)); });
        map_row(s, s, m, [c](float x, float mx) { return fast::exp2(c * x - c * mx); });
        col_vec<rt_fl<16, BC>> rs;
        row_sum(rs, s);
        map(l, l, a, rs, [](float l, float a, float r) { return a * l + r; });
    }
    /// O = a O, and P rounded to bf16 for the next product (only once no product reads O or P). Once
    /// the row maxima settle, a = 1 in most blocks: then the warp skips the multiplies.
    __device__ void rescale_and_round() {
        if (warp_any(a, [](float x) { return x != 1.0f; })) mul_row(o, o, a);
        copy(p, s);
    }
};

extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * 128, 1)
flash_fwd(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
          const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_o, float* lse,
          int heads, int seq, float scale, int causal) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    smem_layout& sm = alloc.take<smem_layout>();
    const int q_block = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;  // heaviest first
    const int kv_blocks = causal ? min((q_block + 1) * BR + BC - 1, seq + BC - 1) / BC : (seq + BC - 1) / BC;

    if (threadIdx.x == 0) {
        sm.k_pipe.init(CONSUMERS * warpgroup::WARPS);
        sm.v_pipe.init(CONSUMERS * warpgroup::WARPS);
        init_mbarrier(sm.q_full, 1);
        fence_mbarrier_init();
    }
    __syncthreads();

    if (warpgroup::groupid() == 0) {  // ---- producer: one thread issues every copy ----
        split::producer();
        if (warpgroup::warp() == 0 && warpgroup::elect_one()) {
            arrive_expect_bytes(sm.q_full, CONSUMERS * tma::bytes<q_tile>);
            for (int w = 0; w < CONSUMERS; ++w) tma::load_async(sm.q[w], map_q, sm.q_full, {b, h, q_block * CONSUMERS + w, 0});
            ring_cursor<STAGES> at;
            for (int j = 0; j < kv_blocks; ++j, at.advance()) {
                wait(sm.k_pipe.empty[at.stage], at.phase ^ 1);
                tma::expect(sm.k_pipe.full[at.stage], sm.k[at.stage]);
                tma::load_async(sm.k[at.stage], map_k, sm.k_pipe.full[at.stage], {b, h, j, 0});
                wait(sm.v_pipe.empty[at.stage], at.phase ^ 1);
                tma::expect(sm.v_pipe.full[at.stage], sm.v[at.stage]);
                tma::load_async(sm.v[at.stage], map_v, sm.v_pipe.full[at.stage], {b, h, j, 0});
            }
        }
        return;
    }

    // ---- consumers ----
    split::consumer();
    const int me = warpgroup::groupid() - 1;
    const int row0 = q_block * BR + me * 64 + 16 * warpgroup::warp();  // this warp's first query row
    const float c = scale * 1.4426950408889634f;                      // scale * log2(e)
    softmax_state st;
    fill(st.m, neg_inf);
    zero(st.l);
    zero(st.o);
    ring_cursor<STAGES> at_k, at_v;
    wait(sm.q_full, 0);

#if SCHEDULE == 0
    for (int j = 0; j < kv_blocks; ++j, at_k.advance(), at_v.advance()) {
        wait(sm.k_pipe.full[at_k.stage], at_k.phase);
        warpgroup::mm_ABt(st.s, sm.q[me], sm.k[at_k.stage]);  // S = Q K_j^T
        warpgroup::mma_async_wait<0>(st.s);
        sm.k_pipe.release(at_k.stage);
        st.exponentiate(j, row0, seq, c, causal);
        st.rescale_and_round();
        wait(sm.v_pipe.full[at_v.stage], at_v.phase);
        warpgroup::mma_AB(st.o, st.p, sm.v[at_v.stage]);  // O += P V_j
        warpgroup::mma_async_wait<0>(st.o, st.p);
        sm.v_pipe.release(at_v.stage);
    }
#else
    constexpr bool pingpong = SCHEDULE == 2;
    if (pingpong) turn::start(me);
    // Block 0: S_0 alone.
    wait(sm.k_pipe.full[at_k.stage], at_k.phase);
    if (pingpong) turn::wait(me);
    warpgroup::mm_ABt(st.s, sm.q[me], sm.k[at_k.stage]);
    if (pingpong) turn::pass(me);
    warpgroup::mma_async_wait<0>(st.s);
    sm.k_pipe.release(at_k.stage);
    at_k.advance();
    st.exponentiate(0, row0, seq, c, causal);
    st.rescale_and_round();
    // Blocks 1 ..: issue S_j and O += P_{j-1} V_{j-1} back to back, exponentiate S_j under the second.
    for (int j = 1; j < kv_blocks; ++j, at_k.advance(), at_v.advance()) {
        // BEGIN SOLUTION hint: one step of the loop: wait for the tiles this step reads, issue both products back to back (taking the tensor cores in turn under ping-pong), finish block j's softmax while P V still runs, and hand each stage back as soon as nothing reads it
        wait(sm.k_pipe.full[at_k.stage], at_k.phase);
        wait(sm.v_pipe.full[at_v.stage], at_v.phase);
        if (pingpong) turn::wait(me);
        warpgroup::mm_ABt(st.s, sm.q[me], sm.k[at_k.stage]);
        warpgroup::mma_AB(st.o, st.p, sm.v[at_v.stage]);
        if (pingpong) turn::pass(me);
        warpgroup::mma_async_wait<1>(st.s);  // S_j is done; P V may still run
        sm.k_pipe.release(at_k.stage);
        st.exponentiate(j, row0, seq, c, causal);
        warpgroup::mma_async_wait<0>(st.o, st.p);
        sm.v_pipe.release(at_v.stage);
        st.rescale_and_round();
        // END SOLUTION
    }
    // The last block's P V.
    wait(sm.v_pipe.full[at_v.stage], at_v.phase);
    if (pingpong) turn::wait(me);
    warpgroup::mma_AB(st.o, st.p, sm.v[at_v.stage]);
    if (pingpong) turn::pass(me, true);
    warpgroup::mma_async_wait<0>(st.o);
    sm.v_pipe.release(at_v.stage);
#endif

    // Epilogue: O / l through this consumer's Q tile (stmatrix), out with one TMA store that skips rows
    // past the end of the head; L = ln(sum) + scaled max, one lane per row.
    div_row(st.o, st.o, st.l);
    warpgroup::store(sm.q[me], st.o);
    fence_proxy_async();  // our ordinary shared stores, then the copy engine reads them
    warpgroup::sync_group<8>(me);
    if (warpgroup::threadid() == 0) {
        tma::store_async(map_o, sm.q[me], {b, h, q_block * CONSUMERS + me, 0});
        tma::store_commit();
    }
    map(st.l, st.l, st.m, [c](float l, float mx) { return (fast::log2(l) + c * mx) * 0.69314718055994531f; });
    store(lse + (size_t(b) * heads + h) * seq + row0, st.l, seq - row0);
    if (warpgroup::threadid() == 0) tma::store_wait_read<0>();
}
