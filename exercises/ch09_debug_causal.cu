// GENERATED from solutions/ch09_debug_causal/ch09_debug_causal.cu by `python -m tklab exercises`.
// DEBUGGING EXERCISE: this program has one bug. Check it as it is (tklab.check("ch09_debug_causal")
// or python -m tklab check ch09_debug_causal), read what the verdict says it did, then find the bug
// and repair it.
// What it should do: O and L of softmax attention, causal or not, for any sequence length
// Stuck? tklab.hint("ch09_debug_causal") in a notebook, or python -m tklab hint ch09_debug_causal.
// Chapter 09, debug exercise ch09_debug_causal: causal attention in two passes, with a wrong answer.
//
//   O = softmax(Q K^T * scale) V   per (batch, head);   L = log-sum-exp of each row of Q K^T * scale.
//   Q, K, V, O: bf16 [batch, heads, seq, HEAD_DIM] (one set of strides for all four); L: fp32 [batch, heads,
//   seq], contiguous. Causal or not; any seq.
//
// Chapter 09's tiles (mma.sync, ldmatrix, cp.async): one block owns BR = 4 x WARP_ROWS query rows, each warp
// WARP_ROWS of them. This kernel does not keep an online softmax: it walks the keys twice. The first pass
// finds each row's maximum score; the second computes P = 2^(c S - c max) (c = scale * log2(e)), its row
// sums and O = P V, with nothing to rescale since the maximum is known. Twice the score products of the
// chapter's kernel -- the price of not rescaling -- but the same masks: under a causal mask a query sees
// the keys up to itself, and only the key blocks that cross a warp's diagonal need masking.
//
// Launch: grid (ceil(seq / BR), heads, batch), 128 threads, flash_shared_bytes of dynamic shared memory.
#include "tk.cuh"

using namespace tk;

#if !defined(HEAD_DIM) || !defined(WARP_ROWS) || !defined(BC)
#error "compile through tklab.attention.build(...), which passes -DHEAD_DIM -DWARP_ROWS -DBC"
#endif
constexpr int WARPS = 4, BR = WARPS * WARP_ROWS;
/// Below any real score yet finite: the maximum of a row no key has reached.
constexpr float NO_MAX_YET = -1e30f;

struct smem_layout {
    st_bf<WARP_ROWS, HEAD_DIM> q[WARPS];  // each warp's own query rows (later: its output rows)
    st_bf<BC, HEAD_DIM> k[2], v[2];       // one key and one value block at a time (the second stages unused)
};
/// The dynamic shared memory a launch must ask for.
extern "C" __device__ int flash_shared_bytes = dynamic_shared_bytes<smem_layout>();

extern "C" __global__ void __launch_bounds__(WARPS * 32)
flash_two_pass(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int heads, int seq,
               long long stride_b, long long stride_h, int stride_row, float scale, int causal) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    smem_layout& sm = alloc.take<smem_layout>();

    const int q_block = blockIdx.x, w = warpid();
    const long long head = blockIdx.z * stride_b + blockIdx.y * stride_h;
    const gl<const bf16> Q(q + head, seq, HEAD_DIM, stride_row), K(k + head, seq, HEAD_DIM, stride_row),
        V(v + head, seq, HEAD_DIM, stride_row);
    const int row0 = q_block * BR + w * WARP_ROWS;  // this warp's first query row
    const int kv_blocks = causal ? min((q_block + 1) * BR + BC - 1, seq + BC - 1) / BC : (seq + BC - 1) / BC;
    const float c = scale * 1.4426950408889634f;  // scale * log2(e)

    load_async_bounded(sm.q[w], Q, {q_block * WARPS + w, 0});  // each warp its own rows
    cp_async_commit();

    rt_fl<WARP_ROWS, BC> s;
    rt_bf<WARP_ROWS, BC> p;
    rt_fl<WARP_ROWS, HEAD_DIM> acc;
    col_vec<decltype(s)> mx, sum;  // one value per query row: its maximum score, the sum of its P

    // S_j = Q K_j^T for key block j (its K in sm.k[0]), masked: -inf where a query may not see a key.
    auto scores = [&](int j) {
        zero(s);
        mma_ABt(s, sm.q[w], sm.k[0], s);
        const int col0 = j * BC;
        if (causal && col0 + BC - 1 > row0) {  // the block crosses this warp's diagonal
            mask_if(s, row0, col0, [](int r, int key) { return key >= r; }, neg_inf);  // keys after the query
        }
        if (col0 + BC > seq) mask_keys_from(s, col0, seq);  // keys past the end
    };

    // Pass 1: every row's maximum score.
    fill(mx, NO_MAX_YET);
    for (int j = 0; j < kv_blocks; ++j) {
        __syncthreads();  // every warp is done with the previous block
        load_async_bounded<WARPS>(sm.k[0], K, {j, 0});
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        scores(j);
        row_max(mx, s, mx);
    }

    // Pass 2: P = 2^(c S - c max), its row sums, O = P V.
    zero(sum);
    zero(acc);
    for (int j = 0; j < kv_blocks; ++j) {
        __syncthreads();
        load_async_bounded<WARPS>(sm.k[0], K, {j, 0});
        load_async_bounded<WARPS>(sm.v[0], V, {j, 0});
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        scores(j);
        map_row(s, s, mx, [c](float x, float top) { return fast::exp2(c * x - c * top); });
        row_sum(sum, s, sum);
        copy(p, s);                        // P in bf16: the A operand of the product
        mma_AB(acc, p, sm.v[0], acc);      // O += P V_j
    }

    // O / sum, out through this warp's shared Q tile (free now) so that rows past seq are not written.
    col_vec<decltype(s)> inv;
    map(inv, sum, [](float x) { return x == 0.0f ? 0.0f : fast::rcp(x); });  // 0 for a row no key reached
    mul_row(acc, acc, inv);
    rt_bf<WARP_ROWS, HEAD_DIM> out;
    copy(out, acc);
    store(sm.q[w], out);
    __syncwarp();
    const gl<bf16> O(o + head, seq, HEAD_DIM, stride_row);
    store_bounded(O, sm.q[w], {q_block * WARPS + w, 0});
    map(sum, sum, mx, [c](float x, float top) { return (fast::log2(x) + c * top) * 0.69314718055994531f; });  // ln
    store(lse + (size_t(blockIdx.z) * heads + blockIdx.y) * seq + row0, sum, seq - row0);
}
