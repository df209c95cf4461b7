// Chapter 09, design exercise ch09_local_mask: FlashAttention forward with a sliding-window (local) mask.
//
//   O = softmax(Q K^T * scale + mask) V  per (batch, head);  L = log-sum-exp of each masked row.
//   Query i sees the `window` keys i - window + 1 .. i (itself and the window - 1 before it): causal, and
//   blind to the distant past. window >= seq is plain causal attention; window = 1 sees only the diagonal.
//
// The kernel is chapter 09's (flash_fwd_tiles.cu): one block of 4 warps owns BR = 4 x WARP_ROWS query rows,
// each warp WARP_ROWS of them, and all 4 walk the same key blocks through a two-stage cp.async ring. What
// the window changes:
//   * the block visits only the key blocks its rows can see, from the first block the window of its first
//     row reaches to the block of its last row's diagonal: O(window) blocks per query block, not O(seq);
//   * a key block that crosses either edge of a warp's window (the diagonal above, the window's start
//     below) is masked, score by score; the blocks in between are not;
//   * the 4 warps share the blocks, so a block can lie entirely outside one warp's windows (or outside
//     some of its rows' windows): those rows meet a block of scores that are all -inf, and if it is the
//     first block they see, their running maximum is still -inf. Then 2^(c s - c m) and 2^(c m_old - c m)
//     are 2^(-inf + inf): NaN, unless the update measures from 0 instead while nothing has been seen.
// Launch: grid (ceil(seq / BR), heads, batch), 128 threads, flash_shared_bytes of dynamic shared memory.
#include "tk.cuh"

using namespace tk;

#ifndef HEAD_DIM
#define HEAD_DIM 64  // d, the head dimension: 64 or 128
#endif
#ifndef WARP_ROWS
#define WARP_ROWS 32  // query rows per warp
#endif
#ifndef BC
#define BC 64  // keys per block: S is WARP_ROWS x BC in registers
#endif
constexpr int WARPS = 4, BR = WARPS * WARP_ROWS;

struct smem_layout {
    st_bf<WARP_ROWS, HEAD_DIM> q[WARPS];  // each warp's own query rows (later: its output rows)
    st_bf<BC, HEAD_DIM> k[2], v[2];       // the two-stage ring of key and value blocks
};
/// The dynamic shared memory a launch must ask for.
extern "C" __device__ int flash_shared_bytes = dynamic_shared_bytes<smem_layout>();

extern "C" __global__ void __launch_bounds__(WARPS * 32)
flash_fwd_local(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int heads, int seq,
                long long stride_b, long long stride_h, int stride_row, float scale, int window) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    smem_layout& sm = alloc.take<smem_layout>();

    const int q_block = gridDim.x - 1 - blockIdx.x, w = warpid();
    const long long head = blockIdx.z * stride_b + blockIdx.y * stride_h;
    const gl<const bf16> Q(q + head, seq, HEAD_DIM, stride_row), K(k + head, seq, HEAD_DIM, stride_row),
        V(v + head, seq, HEAD_DIM, stride_row);

    const int row0 = q_block * BR + w * WARP_ROWS;  // this warp's first query row
    const float c = scale * 1.4426950408889634f;    // scale * log2(e)

    // The key blocks this query block visits: [kv_begin, kv_end). The block's rows are q_block * BR ..
    // q_block * BR + BR - 1; keys past seq - 1 do not exist.
    // BEGIN SOLUTION hint: the first key block the window of the block's first row reaches, and one past the block that holds its last row's diagonal (no key past the end of the sequence)
    const int kv_begin = max(q_block * BR - window + 1, 0) / BC;
    const int kv_end = min(q_block * BR + BR - 1, seq - 1) / BC + 1;
    // STUB: const int kv_begin = 0, kv_end = 0;
    // END SOLUTION

    load_async_bounded(sm.q[w], Q, {q_block * WARPS + w, 0});  // each warp its own rows
    load_async_bounded<WARPS>(sm.k[0], K, {kv_begin, 0});
    load_async_bounded<WARPS>(sm.v[0], V, {kv_begin, 0});
    cp_async_commit();

    rt_fl<WARP_ROWS, BC> s;
    rt_bf<WARP_ROWS, BC> p;
    rt_fl<WARP_ROWS, HEAD_DIM> acc;
    col_vec<decltype(s)> m, m_old, m_use, l, rs;  // one value per query row
    fill(m, neg_inf);
    zero(l);
    zero(acc);

    for (int j = kv_begin; j < kv_end; ++j) {
        const int stage = (j - kv_begin) % 2;
        cp_async_wait<0>();  // block j (and, at the first, Q) has landed for this thread ...
        __syncthreads();     // ... and for every thread; every warp is also done with the other stage
        if (j + 1 < kv_end) {  // start the next block into the other stage
            load_async_bounded<WARPS>(sm.k[stage ^ 1], K, {j + 1, 0});
            load_async_bounded<WARPS>(sm.v[stage ^ 1], V, {j + 1, 0});
            cp_async_commit();
        }

        zero(s);
        mma_ABt(s, sm.q[w], sm.k[stage], s);  // S = Q K_j^T
        const int col0 = j * BC;
        // Scores outside each row's window become -inf, in the blocks that cross an edge of this warp's
        // windows only (rows row0 .. row0 + WARP_ROWS - 1, keys col0 .. col0 + BC - 1).
        // BEGIN SOLUTION hint: which blocks cross the diagonal, which cross the window's start; mask_if with a predicate on (row, key) in the whole matrix
        if (col0 + BC - 1 > row0 || col0 <= row0 + WARP_ROWS - 1 - window)
            mask_if(s, row0, col0, [window](int r, int c) { return c > r || c <= r - window; }, neg_inf);
        // END SOLUTION
        if (col0 + BC > seq) mask_keys_from(s, col0, seq);  // keys past the end

        // The online-softmax update of section 2, in base 2 (P = 2^(c S - c m)), now safe for a row that has
        // met only -inf so far: m_use is what its exponentials are measured from.
        // BEGIN SOLUTION hint: the update of chapter 09's exercise, with every exponential measured from m_use: the running maximum where it is finite, a finite stand-in where a row has seen no key yet
        copy(m_old, m);
        row_max(m, s, m);  // m = max(m_old, rowmax S)
        map(m_use, m, [](float x) { return x == neg_inf ? 0.0f : x; });
        map(m_old, m_old, m_use, [c](float mo, float mu) { return fast::exp2(c * (mo - mu)); });  // a
        map_row(s, s, m_use, [c](float x, float mu) { return fast::exp2(c * x - c * mu); });      // P, fp32
        row_sum(rs, s);
        map(l, l, m_old, rs, [](float l, float a, float r) { return a * l + r; });
        if (warp_any(m_old, [](float a) { return a != 1.0f; })) mul_row(acc, acc, m_old);  // no new max: a = 1
        // END SOLUTION
        copy(p, s);                        // round P to bf16: the A operand of the next product
        mma_AB(acc, p, sm.v[stage], acc);  // O += P V_j
    }

    // O / l, out through this warp's shared Q tile (free now) so that rows past seq are not written.
    div_row(acc, acc, l);
    rt_bf<WARP_ROWS, HEAD_DIM> out;
    copy(out, acc);
    store(sm.q[w], out);
    __syncwarp();
    const gl<bf16> O(o + head, seq, HEAD_DIM, stride_row);
    store_bounded(O, sm.q[w], {q_block * WARPS + w, 0});
    map(l, l, m, [c](float l, float mx) { return (fast::log2(l) + c * mx) * 0.69314718055994531f; });  // ln
    store(lse + (size_t(blockIdx.z) * heads + blockIdx.y) * seq + row0, l, seq - row0);
}
