// Chapter 11's first backward, with the QUERIES as rows (SWAPAB=0; the chapter's kernel, solutions/ch11_flash_bwd/,
// is FlashAttention-3's layout with the keys as rows). Kept as the chapter's point of comparison and for what only
// it has: one consumer, DQ_MODE 0 (atomics) and 2 (deterministic slots), and the turns of ch11_dq_lag.cu.
// tklab.kernels.attention_bwd builds it for the options that name it.
//
// FlashAttention backward for Hopper -- TMA, wgmma, and the forward's log-sum-exp.
//
// The forward kept, for every query row, L = log(sum_j exp(scale * S_ij)). That is all the backward needs
// to rebuild the probabilities one block at a time, never the N x N matrix:
//     P  = exp(scale * Q K^T - L)              (recomputed; exp2 with log2(e) folded in)
//     dP = dO V^T
//     dS = P o (dP - D),  D = rowsum(dO o O)   (D: one number per query row, from a first small kernel)
//     dV = P^T dO,   dK = scale * dS^T Q,   dQ = scale * dS K
// Three kernels, launched in this order (tklab/course/attention_bwd.py):
//   flash_bwd_prep  D = rowsum(dO o O) per row, and the fp32 dQ accumulator zeroed;
//   flash_bwd       one block per KV_BLOCK keys of one head: K and V stay in shared memory while the block
//                   walks over every query block that sees them (all of them; under a causal mask only
//                   those at or below the diagonal). dK and dV accumulate in registers and are written
//                   once; dQ of a query block gets a share from every key block, so each block ADDS its
//                   share into the fp32 accumulator, atomically (many blocks meet on one row);
//   flash_bwd_dq    dQ = scale * accumulator, rounded to bf16 (DQ_MODE 2: the sum of the key blocks' slots).
//
// flash_bwd's roles (warp specialisation, as chapter 10): warpgroup 0 is the PRODUCER -- one thread loads
// K and V once, then streams (Q, dO) of each query block into a ring of STAGES shared stages with TMA;
// CONSUMERS warpgroups each own 64 of the block's keys and run, per query block:
//     S  = Q K^T,  dP = dO V^T            (wgmma, both operands in shared memory, B read K-major)
//     P, dS in registers                  (rows = this warp's 16 queries; L and D read from global)
//     P, dS -> shared memory (bf16)       (the transposed products need them with the keys as rows)
//     dV += P^T dO,  dK += dS^T Q         (wgmma reading A "MN-major": the transpose costs nothing)
//     dQ share = dS K                     (A = dS from shared memory, B = K read MN-major)
//     dQ share -> added into the fp32 accumulator, DQ_MODE 0: atomicAdd from registers, 2 per pair;
//                 DQ_MODE 1: through shared memory, one TMA reduce-add (cp.reduce.async.bulk) per box;
//                 DQ_MODE 2: through shared memory, a plain TMA store into a slot of its own (one per key
//                 block, and consumer without DQ_SPLIT), which flash_bwd_dq sums in a fixed order
// Measured on the H200 and not kept (each slower against cuDNN in a run of its own; what each did and its run:
// docs/ROADMAP.md, chapter 11): the next block's S and dP issued before this block's P
// and dS (software pipelining), the next S under the dQ hand-off, heaviest key blocks first, and the two
// consumers' dQ summed before one reduce-add. What was kept beyond this file: dQ one step late with the
// consumers taking turns (solutions/variants/ch11_dq_lag.cu, the default at d = 128).
// The dQ share: with DQ_SPLIT (d = 128, two consumers) consumer c computes columns [64c, 64c + 64) of
// dQ over ALL the block's keys (both dS tiles times its panel of both K tiles): half the registers and
// half the additions of each consumer adding 64 x 128 for its own keys (the plain way, d = 64).
// With DQ_MODE 0 or 1 dQ is summed over key blocks by atomic additions, so its last bits depend on the order
// blocks finish: not bit-for-bit reproducible run to run (dK, dV are: each is written by one block). DQ_MODE 2
// is: every share lands in its own slot, and the last pass adds a row's slots in key-block order; the price
// is memory, N / KV_BLOCK copies of dQ in fp32, written once and read once.
//
// Layouts: Q, K, V, O, dO, dQ, dK, dV bf16 [batch, heads, seq, HEAD_DIM] (rank-4 TMA maps for the tiles,
// so any strides with a contiguous last dimension; tiles past the end of a head read zeros and are not
// written back); L, D fp32 [batch, heads, seq]; the dQ accumulator fp32 [batch, heads, seq, HEAD_DIM],
// contiguous; with DQ_MODE 2 the slots instead, fp32 [batch, heads, slots * q_blocks * 64, HEAD_DIM]: slot s
// holds rows 0 .. q_blocks * 64 - 1 of one key block's shares (and with CONSUMERS == 2 at d = 64, of one
// consumer's), s = kv (DQ_SPLIT) or kv * CONSUMERS + consumer.
#include "tk.cuh"
#include "tk/hopper/tma_reduce.cuh"  // TMA reduce-add with rank-4 coordinates
#include "tk/types/shared/panel.cuh"  // one 64-column panel of a tile as a tile

using namespace tk;

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef CONSUMERS
#define CONSUMERS 2  // consumer warpgroups, 64 keys each
#endif
#ifndef STAGES
#define STAGES 2  // (Q, dO) stages in the ring
#endif
#ifndef DQ_MODE
#define DQ_MODE 1  // 1: TMA reduce-add from shared memory (the fastest measured); 0: atomicAdd; 2: slots
#endif
#ifndef UNIFORM
// 1: the consumer index from a shuffle, so the wgmma descriptors live in uniform registers. Measured on the
// H200 (bench/results/flash_bwd_*.md): d = 128 0.93-0.95x cuDNN against 0.86-0.90x without, d = 64 0.70-0.71x
// against 0.81-0.83x. So on at d = 128 only.
#define UNIFORM (HEAD_DIM == 128)
#endif
static_assert(DQ_MODE >= 0 && DQ_MODE <= 2, "DQ_MODE is 0 (atomicAdd), 1 (TMA reduce-add) or 2 (slots)");
constexpr bool DQ_SPLIT = CONSUMERS == 2 && HEAD_DIM == 128;
constexpr int DQ_COLS = DQ_SPLIT ? HEAD_DIM / 2 : HEAD_DIM;  // columns of dQ each consumer adds
constexpr int BR = 64;                 // query rows per step (one wgmma M)
constexpr int KV_BLOCK = 64 * CONSUMERS;  // keys per block
constexpr int SLOTS_PER_KV = DQ_SPLIT ? 1 : CONSUMERS;  // DQ_MODE 2: dQ slots per key block
constexpr float LOG2E = 1.4426950408889634f;
// Named barriers (0 is __syncthreads), one range of ids per purpose: both consumers together (1); each
// consumer alone around P and dS when they do not share them (2, 3); each consumer alone before its TMA
// stores (5, 6). Checked disjoint here, so an option that shifts one stops the build. (The ranges are the
// ids the consumers reach: sync_group's switch also names ids for warpgroups 2 and 3, never taken here.)
constexpr int CONSUMERS_BARRIER = 1, GUARD_BARRIERS = 2, STORE_BARRIERS = 5;
constexpr warpgroup::barrier_ids consumers_ids{CONSUMERS_BARRIER, 1}, guard_ids{GUARD_BARRIERS, CONSUMERS},
    store_ids{STORE_BARRIERS, CONSUMERS};
TK_BARRIERS_DISJOINT(consumers_ids, guard_ids);
TK_BARRIERS_DISJOINT(consumers_ids, store_ids);
TK_BARRIERS_DISJOINT(guard_ids, store_ids);
// Two consumers need more than the 168 registers a 384-thread block gets evenly (d = 128: dK and dV are 64
// fp32 registers each, S and dP 32 each, the dQ share 32): the producer gives its registers to them.
using split = warpgroup::register_split<24, 240, 2>;

using q_tile = st_bf<BR, HEAD_DIM>;   // a query block's Q or dO
using kv_tile = st_bf<64, HEAD_DIM>;  // one consumer's K or V rows (later its dK, dV on the way out)
using p_tile = st_bf<BR, 64>;         // one consumer's P or dS: queries x its keys
using dq_tile = st_fl<BR, DQ_COLS>;   // one consumer's dQ share on its way to TMA (DQ_MODE 1, 2)

struct smem_layout {
    kv_tile k[CONSUMERS], v[CONSUMERS];
    q_tile q[STAGES], dout[STAGES];
    p_tile p[CONSUMERS], ds[CONSUMERS];
#if DQ_MODE >= 1
    dq_tile dq[CONSUMERS];
#endif
    pipeline<STAGES> q_pipe;  // Q and dO of one query block share a stage and its two barriers
    mbarrier kv_full;
};
/// The dynamic shared memory flash_bwd needs (tklab.course.attention_bwd reads it from the module).
extern "C" __device__ int flash_bwd_shared_bytes = dynamic_shared_bytes<smem_layout>();
extern "C" __device__ int flash_bwd_kv_block = KV_BLOCK;
extern "C" __device__ int flash_bwd_threads = (CONSUMERS + 1) * 128;

// ---- 1. the preprocess: D = rowsum(dO o O), and the dQ accumulator zeroed ------------------------------
/// One warp per query row. o and dout: element strides (batch, head, row); delta fp32 [b, h, seq].
extern "C" __global__ void flash_bwd_prep(const bf16* o, const bf16* dout, float* delta, float* dq_acc,
                                          int heads, int seq, long o_sb, long o_sh, long o_sn, long do_sb,
                                          long do_sh, long do_sn) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, h = blockIdx.y, b = blockIdx.z;
    if (row >= seq) return;
    const int lane = threadIdx.x % 32;
    const bf16* orow = o + b * o_sb + h * o_sh + row * o_sn;
    const bf16* drow = dout + b * do_sb + h * do_sh + row * do_sn;
    const size_t bh_row = (size_t(b) * heads + h) * seq + row;
    float sum = 0.0f;
#pragma unroll
    for (int c = 2 * lane; c < HEAD_DIM; c += 64) {  // a pair of neighbours per lane and step
        const float2 x = to_float2(*reinterpret_cast<const bf16_2*>(orow + c));
        const float2 y = to_float2(*reinterpret_cast<const bf16_2*>(drow + c));
        sum += x.x * y.x + x.y * y.y;
        if (DQ_MODE != 2) *reinterpret_cast<float2*>(dq_acc + bh_row * HEAD_DIM + c) = make_float2(0.0f, 0.0f);
    }
    for (int off = 16; off; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) delta[bh_row] = sum;
}

// ---- 3. the last pass: dQ = scale * accumulator, in bf16 ---------------------------------------------
/// One thread per pair of elements of one row; dq: element strides (batch, head, row). DQ_MODE 2: the
/// accumulator is the slots, and a row's sum runs over the key blocks that visited its query block (under a
/// causal mask those whose first key is at or before the block's last row), always in the same order.
extern "C" __global__ void flash_bwd_dq(const float* dq_acc, bf16* dq, int heads, int seq, long sb, long sh,
                                        long sn, float scale, int causal) {
    constexpr int PAIRS = HEAD_DIM / 2;
    const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;  // pair index in this (batch, head)
    const int h = blockIdx.y, b = blockIdx.z;
    if (i >= long(seq) * PAIRS) return;
    const int row = int(i / PAIRS), c = int(i % PAIRS) * 2;
#if DQ_MODE == 2
    const int q_rows = (seq + BR - 1) / BR * BR, last_row = min((row / BR + 1) * BR, seq) - 1;
    const int kv_blocks = causal ? last_row / KV_BLOCK + 1 : (seq + KV_BLOCK - 1) / KV_BLOCK;
    const float* slot0 = dq_acc + (size_t(b) * heads + h) * size_t((seq + KV_BLOCK - 1) / KV_BLOCK) * SLOTS_PER_KV * q_rows * HEAD_DIM;
    float2 x = make_float2(0.0f, 0.0f);
    for (int s = 0; s < kv_blocks * SLOTS_PER_KV; ++s) {  // key-block order: the same sum on every run
        const float2 y = *reinterpret_cast<const float2*>(slot0 + (size_t(s) * q_rows + row) * HEAD_DIM + c);
        x.x += y.x;
        x.y += y.y;
    }
#else
    const float2 x = *reinterpret_cast<const float2*>(dq_acc + ((size_t(b) * heads + h) * seq + row) * HEAD_DIM + c);
#endif
    *reinterpret_cast<bf16_2*>(dq + b * sb + h * sh + row * sn + c) = from_float2<bf16>(make_float2(scale * x.x, scale * x.y));
}

// ---- 2. the main kernel ---------------------------------------------------------------------------------
using row_values = col_vec<rt_fl<16, 64>>;  // one value per query row of a warp's 16 (lane_g layout)

/// A per-row vector (L or D) for this warp's 16 rows row0 .. row0 + 15, times `mul`; rows past the end
/// of the sequence get `pad` (for L: +inf, so that P = exp2(-inf) = 0 there). Each lane holds rows g and
/// g + 8 (rv.cuh), so each reads its two values straight from global memory (L2 serves the repeats).
__device__ inline row_values load_rows(const float* vec, int row0, int seq, float mul, float pad) {
    row_values out;
    const int r = row0 + laneid() / 4;
    out.data[0][0] = r < seq ? vec[r] * mul : pad;
    out.data[0][1] = r + 8 < seq ? vec[r + 8] * mul : pad;
    return out;
}

/// This block's key block, head and batch. Each role calls it after its register split: values computed
/// before setmaxnreg and live across it are kept on the stack by ptxas (d = 128: 40 B of spills for one).
struct block_coords {
    int kv, h, b;
};
__device__ inline block_coords coords(int heads, int seq) {
    return {int(blockIdx.x), int(blockIdx.y), int(blockIdx.z)};
}

/// The producer's work (call after its register split): one thread loads this block's K and V once, then
/// streams (Q, dO) of every query block that sees them through the ring. A template on the shared-memory
/// layout, so that the variants in solutions/variants/ (layouts of their own) share it.
template <typename Layout>
__device__ inline void produce(Layout& sm, const CUtensorMap& map_q, const CUtensorMap& map_k,
                               const CUtensorMap& map_v, const CUtensorMap& map_do, int heads, int seq, int causal) {
    const auto [kv, h, b] = coords(heads, seq);
    const int q_first = causal ? kv * KV_BLOCK / BR : 0;  // earlier query blocks see none of these keys
    const int q_blocks = (seq + BR - 1) / BR;
    if (warpgroup::warp() == 0 && warpgroup::elect_one()) {
        arrive_expect_bytes(sm.kv_full, 2 * CONSUMERS * tma::bytes<kv_tile>);
        for (int w = 0; w < CONSUMERS; ++w) {
            tma::load_async(sm.k[w], map_k, sm.kv_full, {b, h, kv * CONSUMERS + w, 0});
            tma::load_async(sm.v[w], map_v, sm.kv_full, {b, h, kv * CONSUMERS + w, 0});
        }
        ring_cursor<STAGES> at;
        for (int i = q_first; i < q_blocks; ++i, at.advance()) {
            wait(sm.q_pipe.empty[at.stage], at.phase ^ 1);
            tma::expect(sm.q_pipe.full[at.stage], sm.q[at.stage], sm.dout[at.stage]);
            tma::load_async(sm.q[at.stage], map_q, sm.q_pipe.full[at.stage], {b, h, i, 0});
            tma::load_async(sm.dout[at.stage], map_do, sm.q_pipe.full[at.stage], {b, h, i, 0});
        }
    }
}

extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * 128, 1)
flash_bwd(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
          const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_do,
          const __grid_constant__ CUtensorMap map_dk, const __grid_constant__ CUtensorMap map_dv,
          const __grid_constant__ CUtensorMap map_dq, const float* lse, const float* delta, float* dq_acc,
          int heads, int seq, float scale, int causal) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    smem_layout& sm = alloc.take<smem_layout>();
    const int q_blocks = (seq + BR - 1) / BR;

    if (threadIdx.x == 0) {
        sm.q_pipe.init(CONSUMERS * warpgroup::WARPS);
        init_mbarrier(sm.kv_full, 1);
        fence_mbarrier_init();
    }
    __syncthreads();

    if (warpgroup::groupid() == 0) {  // ---- producer: one thread issues every copy ----
        if constexpr (CONSUMERS == 2) split::producer();
        produce(sm, map_q, map_k, map_v, map_do, heads, seq, causal);
        return;
    }

    // ---- consumers: warpgroup `me` owns keys key0 .. key0 + 63 ----
    if constexpr (CONSUMERS == 2) split::consumer();
    const auto [kv, h, b] = coords(heads, seq);
    const int q_first = causal ? kv * KV_BLOCK / BR : 0;
#if UNIFORM
    // The same in every lane (lane 0's, by a shuffle), so the compiler keeps the addresses of k[me], v[me],
    // p[me], ds[me] and their wgmma descriptors in uniform registers instead of rebuilding them in ordinary
    // ones and moving them over (R2UR) before each of the step's 32 wgmma (chapter 10's UNIFORM=1).
    const int me = __shfl_sync(0xffffffffu, warpgroup::groupid() - 1, 0), w = warpgroup::warp();
#else
    const int me = warpgroup::groupid() - 1, w = warpgroup::warp();
#endif
    const int key0 = kv * KV_BLOCK + me * 64;
    const float c = scale * LOG2E;  // S scaled and in log2 units: P = exp2(c S - L log2 e)
    const size_t bh = size_t(b) * heads + h;
    const bool issuer = warpgroup::threadid() == 0;  // issues this consumer's TMA stores
    // The barrier guarding P, dS (and K at the end): with DQ_SPLIT each consumer reads the OTHER's dS and
    // K too, so both consumers meet; else each warpgroup meets alone.
    auto meet = [me] {
        if constexpr (DQ_SPLIT) warpgroup::named_barrier<CONSUMERS_BARRIER, CONSUMERS * warpgroup::THREADS>::sync();
        else warpgroup::sync_group<GUARD_BARRIERS>(me);
    };
    rt_fl<16, HEAD_DIM> dk, dv;
    zero(dk);
    zero(dv);
    ring_cursor<STAGES> at;
    wait(sm.kv_full, 0);
    // Both consumers meet every step with DQ_SPLIT: equal step counts, checked under -DTK_DEBUG_TURNS.
    if constexpr (DQ_SPLIT) warpgroup::equal_steps<CONSUMERS_BARRIER, CONSUMERS>(me, q_blocks - q_first);
    rt_fl<16, 64> s, dp;
    for (int i = q_first; i < q_blocks; ++i, at.advance()) {
        const int row0 = i * BR + 16 * w;  // this warp's first query row
        wait(sm.q_pipe.full[at.stage], at.phase);
        warpgroup::mm_ABt(s, sm.q[at.stage], sm.k[me]);      // S  = Q K^T
        warpgroup::mm_ABt(dp, sm.dout[at.stage], sm.v[me]);  // dP = dO V^T
        const row_values l2 = load_rows(lse + bh * seq, row0, seq, LOG2E, __int_as_float(0x7f800000));
        const row_values d = load_rows(delta + bh * seq, row0, seq, 1.0f, 0.0f);
        warpgroup::mma_async_wait<0>(s, dp);
        rt_fl<16, DQ_COLS> dq;  // this consumer's dQ share
        if (DQ_MODE >= 1 && issuer) tma::store_wait_read<0>();  // the copy engine has read the last share

        // P = exp2(c S - L log2 e), 0 for keys past the end or (causal) after the query; dS = P (dP - D).
        map_row(s, s, l2, [c](float x, float l) { return fast::exp2(c * x - l); });
        if (key0 + 63 >= seq || (causal && key0 + 63 > row0))
            mask_if(s, row0, key0, [seq, causal](int r, int k) { return k >= seq || (causal && k > r); }, 0.0f);
        sub_row(dp, dp, d);
        mul(dp, dp, s);
        // P and dS to shared memory (bf16): the transposed products read them there. First everyone must
        // be past the previous block's products: dV += P^T dO of warp w reads the P columns of w's keys
        // in EVERY warp's rows, so one warp's new rows could overwrite them early.
        meet();
        warpgroup::store(sm.p[me], s);
        warpgroup::store(sm.ds[me], dp);
        fence_proxy_async();  // our ordinary stores, then wgmma (the async proxy) reads them
        meet();

        warpgroup::mma_AtB(dv, sm.p[me], sm.dout[at.stage]);  // dV += P^T dO
        warpgroup::mma_AtB(dk, sm.ds[me], sm.q[at.stage]);    // dK += dS^T Q
        if constexpr (DQ_SPLIT) {  // dQ columns [64 me, 64 me + 64), summed over both consumers' keys
#pragma unroll
            for (int g = 0; g < CONSUMERS; ++g) warpgroup::mma_AB(dq, sm.ds[g], panel(sm.k[g], me), g > 0);
        } else {
            warpgroup::mm_AB(dq, sm.ds[me], sm.k[me]);        // dQ share: this consumer's keys, all columns
        }
        warpgroup::mma_async_wait<0>(dv, dk, dq);
        sm.q_pipe.release(at.stage);
#if DQ_MODE == 0
        float* acc = dq_acc + (bh * seq + row0) * HEAD_DIM + (DQ_SPLIT ? me * DQ_COLS : 0);
        for_each_pair(dq, [&](const float2& x, rc at_, rc e0, rc) {
            if (row0 + at_.r + e0.r < seq) {
                float* p = acc + (at_.r + e0.r) * HEAD_DIM + at_.c + e0.c;
                atomicAdd(p, x.x);
                atomicAdd(p + 1, x.y);
            }
        });
#else
        warpgroup::store(sm.dq[me], dq);
        fence_proxy_async();
        warpgroup::sync_group<STORE_BARRIERS>(me);  // this consumer's 4 warps wrote their rows
        const block_coords at_b = coords(heads, seq);  // recomputed, not kept live through the step
        if (issuer) {
#if DQ_MODE == 2
            const int slot = DQ_SPLIT ? at_b.kv : at_b.kv * CONSUMERS + me;  // its own slot: a store, no addition
            tma::store_async(map_dq, sm.dq[me], {at_b.b, at_b.h, slot * q_blocks + i, DQ_SPLIT ? me : 0});
#else
            tma::store_add_async(map_dq, sm.dq[me], {at_b.b, at_b.h, i, DQ_SPLIT ? me : 0});
#endif
            tma::store_commit();
        }
#endif
    }

    // Epilogue: dK = scale dK; both through this consumer's K and V tiles (no wgmma reads them any more),
    // out with TMA stores that skip rows past the end of the head.
    mul(dk, dk, scale);
    meet();  // every warp's last wgmma on k[me], v[me] has completed (with DQ_SPLIT: both consumers')
    warpgroup::store(sm.k[me], dk);
    warpgroup::store(sm.v[me], dv);
    fence_proxy_async();
    warpgroup::sync_group<STORE_BARRIERS>(me);
    if (issuer) {
        tma::store_async(map_dk, sm.k[me], {b, h, kv * CONSUMERS + me, 0});
        tma::store_async(map_dv, sm.v[me], {b, h, kv * CONSUMERS + me, 0});
        tma::store_commit();
        tma::store_wait_read<0>();  // also the last dQ reduce or store: shared memory outlives the reads
    }
}
