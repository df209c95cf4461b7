// Chapter 10, design exercise ch10_gqa: grouped-query attention on the Hopper kernel.
//
// Grouped-query attention (GQA) gives every group of heads / kv_heads query heads one shared key head and
// one shared value head: Q and O are [batch, heads, seq, HEAD_DIM], K and V [batch, kv_heads, seq,
// HEAD_DIM] (bf16, rank-4 TMA maps; kv_heads divides heads). Query head h reads the K/V head of its
// group: heads 0 .. g-1 share K/V head 0, heads g .. 2g-1 share head 1, and so on (g = heads / kv_heads).
// kv_heads = heads is ordinary multi-head attention; kv_heads = 1 is multi-query attention. K and V are
// g times smaller, and so is what the KV cache of a decoder keeps.
//
// The kernel is chapter 10's (flash_fwd_hopper): a PRODUCER warpgroup streams K and V blocks through two
// rings of STAGES stages with TMA; CONSUMERS warpgroups of 64 query rows each compute S = Q K^T and
// O += P V with wgmma, with the online softmax between them. This copy keeps the plain schedule (S_j, wait,
// softmax, P V_j, wait): the overlapped loop is the answer of exercise ch10_flash. The grid is one block
// per (query block, query head, batch), as before: blockIdx.y is the QUERY head.
#include "tk.cuh"
#include "tk/ops/warp/online_softmax.cuh"  // chapter 09's update, packaged (not in tk.cuh)

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
constexpr int BR = 64 * CONSUMERS;
using split = warpgroup::register_split<24, CONSUMERS == 2 ? 240 : 160, CONSUMERS>;
using q_tile = st_bf<64, HEAD_DIM>;
using kv_tile = st_bf<BC, HEAD_DIM>;

struct smem_layout {
    q_tile q[CONSUMERS];  // each consumer's 64 query rows; its output rows at the end
    kv_tile k[STAGES], v[STAGES];
    pipeline<STAGES> k_pipe, v_pipe;
    mbarrier q_full;
};
/// The dynamic shared memory a launch must ask for.
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
        // Chapter 09's online-softmax update, as the library packages it (tk/ops/warp/online_softmax.cuh):
        // the new running max m, the factor a = 2^(c (m_old - m)) that rescales l now and O later,
        // P = 2^(c S - c m) in s, and l = a l + the row sums of P. Unguarded, as chapter 09's kernel:
        // every row of a query block meets at least one key in its first key block.
        // O's rescale waits for rescale_and_round.
        online_softmax<false>(s, m, l, a, c);
    }
    /// O = a O, and P rounded to bf16 for the next product (only once no product reads O or P). Once
    /// the row maxima settle, a = 1 in most blocks: then the warp skips the multiplies.
    __device__ void rescale_and_round() {
        if (warp_any(a, [](float x) { return x != 1.0f; })) mul_row(o, o, a);
        copy(p, s);
    }
};

extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * 128, 1)
flash_fwd_gqa(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
              const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_o, float* lse,
              int heads, int kv_heads, int seq, float scale, int causal) {
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
            // Stream key and value blocks 0 .. kv_blocks - 1 of this query head's K/V head through the rings.
            // BEGIN SOLUTION hint: the K/V head that query head h reads
            const int kv_h = h / (heads / kv_heads);  // h is in the group of g = heads / kv_heads query heads
            // STUB: const int kv_h = 0;
            // END SOLUTION
            ring_cursor<STAGES> at;
            for (int j = 0; j < kv_blocks; ++j, at.advance()) {
                wait(sm.k_pipe.empty[at.stage], at.phase ^ 1);
                tma::expect(sm.k_pipe.full[at.stage], sm.k[at.stage]);
                // BEGIN SOLUTION hint: load key block j of that K/V head into the K ring's stage (rank-4 coordinates)
                tma::load_async(sm.k[at.stage], map_k, sm.k_pipe.full[at.stage], {b, kv_h, j, 0});
                // END SOLUTION
                wait(sm.v_pipe.empty[at.stage], at.phase ^ 1);
                tma::expect(sm.v_pipe.full[at.stage], sm.v[at.stage]);
                // BEGIN SOLUTION hint: the same for value block j, into the V ring's stage
                tma::load_async(sm.v[at.stage], map_v, sm.v_pipe.full[at.stage], {b, kv_h, j, 0});
                // END SOLUTION
            }
        }
        return;
    }

    // ---- consumers ----
    split::consumer();
    const int me = warpgroup::groupid() - 1;
    const int row0 = q_block * BR + me * 64 + 16 * warpgroup::warp();  // this warp's first query row
    const float c = scale * 1.4426950408889634f;                      // scale * log2(e)
    softmax_state rows;  // this warp's 16 query rows
    fill(rows.m, neg_inf);
    zero(rows.l);
    zero(rows.o);
    ring_cursor<STAGES> at_k, at_v;
    wait(sm.q_full, 0);

    for (int j = 0; j < kv_blocks; ++j, at_k.advance(), at_v.advance()) {
        wait(sm.k_pipe.full[at_k.stage], at_k.phase);
        warpgroup::mm_ABt(rows.s, sm.q[me], sm.k[at_k.stage]);  // S = Q K_j^T
        warpgroup::mma_async_wait<0>(rows.s);
        sm.k_pipe.release(at_k.stage);
        rows.exponentiate(j, row0, seq, c, causal);
        rows.rescale_and_round();
        wait(sm.v_pipe.full[at_v.stage], at_v.phase);
        warpgroup::mma_AB(rows.o, rows.p, sm.v[at_v.stage]);  // O += P V_j
        warpgroup::mma_async_wait<0>(rows.o, rows.p);
        sm.v_pipe.release(at_v.stage);
    }

    // Epilogue: O / l through this consumer's Q tile (stmatrix), out with one TMA store that skips rows
    // past the end of the head; L = ln(sum) + scaled max, one lane per row.
    div_row(rows.o, rows.o, rows.l);
    warpgroup::store(sm.q[me], rows.o);
    fence_proxy_async();  // our ordinary shared stores, then the copy engine reads them
    warpgroup::sync_group<8>(me);
    if (warpgroup::threadid() == 0) {
        tma::store_async(map_o, sm.q[me], {b, h, q_block * CONSUMERS + me, 0});
        tma::store_commit();
    }
    map(rows.l, rows.l, rows.m, [c](float l, float mx) { return (fast::log2(l) + c * mx) * 0.69314718055994531f; });
    store(lse + (size_t(b) * heads + h) * seq + row0, rows.l, seq - row0);
    if (warpgroup::threadid() == 0) tma::store_wait_read<0>();
}
