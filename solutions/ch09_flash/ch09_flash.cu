// Chapter 09 solution: FlashAttention forward with warp-level tiles (mma.sync, ldmatrix, cp.async).
//
//   O = softmax(Q K^T * scale) V   per (batch, head);   L = log-sum-exp of each row of Q K^T * scale.
//   Q, K, V, O: bf16 [batch, heads, seq, HEAD_DIM] with any strides for batch, head and row (one set for all
//   four); L: fp32 [batch, heads, seq], contiguous. Causal or not; seq need not be a multiple of anything.
//
// One block owns BR = 4 x WARP_ROWS query rows of one head; each of its 4 warps owns WARP_ROWS of them
// and walks over the keys BC at a time:
//     S = Q_w K_j^T                      (tensor cores; K_j streamed from shared memory)
//     m = max(m, rowmax S)               the running row maximum, and the factor a = 2^(c(m_old - m))
//     P = 2^(c S - c m),  l = a l + rowsum P,  O = a O + P V_j
// with c = scale * log2(e), so every exponential is one ex2.approx. The N x N matrix of scores never
// exists: each warp holds one WARP_ROWS x BC block of it at a time, in registers. K and V blocks come
// through a two-stage cp.async ring shared by the 4 warps: block j+1 loads while block j is used.
#include "tk.cuh"

using namespace tk;

// HEAD_DIM (d: 64 or 128), WARP_ROWS (query rows per warp: each K/V subtile read from shared memory feeds
// WARP_ROWS/16 mmas) and BC (keys per block: S is WARP_ROWS x BC in registers) have one home:
// tklab.attention.DEFAULTS, which passes each with -D and launches with the same values.
#if !defined(HEAD_DIM) || !defined(WARP_ROWS) || !defined(BC)
#error "compile through tklab.attention.build(...), which passes -DHEAD_DIM -DWARP_ROWS -DBC"
#endif
constexpr int WARPS = 4, BR = WARPS * WARP_ROWS;
/// Below any real score (|S c| < 2^127 / 2^29) yet finite: the running max of a row no key has reached.
constexpr float NO_MAX_YET = -1e30f;

struct smem_layout {
    st_bf<WARP_ROWS, HEAD_DIM> q[WARPS];  // each warp's own query rows (later: its output rows)
    st_bf<BC, HEAD_DIM> k[2], v[2];       // the two-stage ring of key and value blocks
};
/// The dynamic shared memory a launch must ask for (tklab.attention reads it from the compiled module).
extern "C" __device__ int flash_shared_bytes = dynamic_shared_bytes<smem_layout>();

extern "C" __global__ void __launch_bounds__(WARPS * 32)
flash_fwd(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int heads, int seq,
          long long stride_b, long long stride_h, int stride_row, float scale, int causal) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    smem_layout& sm = alloc.take<smem_layout>();

    // Heaviest query blocks first: under a causal mask the last block sees every key.
    const int q_block = gridDim.x - 1 - blockIdx.x, w = warpid();
    const long long head = blockIdx.z * stride_b + blockIdx.y * stride_h;
    const gl<const bf16> Q(q + head, seq, HEAD_DIM, stride_row), K(k + head, seq, HEAD_DIM, stride_row), V(v + head, seq, HEAD_DIM, stride_row);

    const int row0 = q_block * BR + w * WARP_ROWS;  // this warp's first query row
    const int kv_blocks = causal ? min((q_block + 1) * BR + BC - 1, seq + BC - 1) / BC : (seq + BC - 1) / BC;
    const float c = scale * 1.4426950408889634f;  // scale * log2(e)

    load_async_bounded(sm.q[w], Q, {q_block * WARPS + w, 0});  // each warp its own rows
    load_async_bounded<WARPS>(sm.k[0], K, {0, 0});
    load_async_bounded<WARPS>(sm.v[0], V, {0, 0});
    cp_async_commit();

    rt_fl<WARP_ROWS, BC> s;
    rt_bf<WARP_ROWS, BC> p;
    rt_fl<WARP_ROWS, HEAD_DIM> acc;
    col_vec<decltype(s)> m, m_old, l, rs;  // one value per query row
    // The running max starts at a finite floor, not -inf: a row whose keys are all masked so far keeps
    // m = NO_MAX_YET, so 2^(c S - c m) = 2^(-inf) = 0 and 2^(c (m_old - m)) = 1 -- never -inf - (-inf) = NaN,
    // at no cost in registers (a per-element select spilled on CUDA 13.0). l stays 0: O = 0, L = -inf.
    fill(m, NO_MAX_YET);
    zero(l);
    zero(acc);

    for (int j = 0; j < kv_blocks; ++j) {
        const int stage = j % 2;
        cp_async_wait<0>();  // block j (and, at j = 0, Q) has landed for this thread ...
        __syncthreads();     // ... and for every thread; every warp is also done with block j-1's stage
        if (j + 1 < kv_blocks) {  // start the next block into the other stage
            load_async_bounded<WARPS>(sm.k[stage ^ 1], K, {j + 1, 0});
            load_async_bounded<WARPS>(sm.v[stage ^ 1], V, {j + 1, 0});
            cp_async_commit();
        }

        zero(s);
        mma_ABt(s, sm.q[w], sm.k[stage], s);  // S = Q K_j^T
        const int col0 = j * BC;
        if (causal && col0 + BC - 1 > row0) causal_mask(s, row0, col0);  // blocks on the diagonal only
        if (col0 + BC > seq) mask_keys_from(s, col0, seq);               // keys past the end

        // The online-softmax update (chapter 09, section 2), in base 2: P = 2^(c S - c m).
        // BEGIN SOLUTION hint: the online-softmax update for this key block: the new running max, the factor that rescales the old state, P from S, the new running sum, and the accumulator rescaled (a warp may skip that when no row's max changed)
        copy(m_old, m);
        row_max(m, s, m);  // m = max(m_old, rowmax S)
        map(m_old, m_old, m, [c](float mo, float mn) { return fast::exp2(c * (mo - mn)); });  // a
        map_row(s, s, m, [c](float x, float mx) { return fast::exp2(c * (x - mx)); });     // P
        row_sum(rs, s);
        map(l, l, m_old, rs, [](float l, float a, float r) { return a * l + r; });
        if (warp_any(m_old, [](float a) { return a != 1.0f; })) mul_row(acc, acc, m_old);  // no new max: a = 1
        // END SOLUTION
        copy(p, s);                         // round P to bf16: the A operand of the next product
        mma_AB(acc, p, sm.v[stage], acc);   // O += P V_j
    }

    // O / l, out through this warp's shared Q tile (free now) so that rows past seq are not written.
    map(rs, l, [](float l) { return l == 0.0f ? 0.0f : fast::rcp(l); });  // 1/l; 0 for a row no key reached
    mul_row(acc, acc, rs);
    rt_bf<WARP_ROWS, HEAD_DIM> out;
    copy(out, acc);
    store(sm.q[w], out);
    __syncwarp();
    const gl<bf16> O(o + head, seq, HEAD_DIM, stride_row);
    store_bounded(O, sm.q[w], {q_block * WARPS + w, 0});
    map(l, l, m, [c](float l, float mx) { return (fast::log2(l) + c * mx) * 0.69314718055994531f; });  // ln
    store(lse + (size_t(blockIdx.z) * heads + blockIdx.y) * seq + row0, l, seq - row0);
}
