// Chapter 11 in FlashAttention-3's Hopper layout (SWAPAB=1; two consumers, DQ_MODE 1): the products
// with the keys as rows, so P^T and dS^T are born in registers where the transposed products want them.
// tklab.kernels.attention_bwd appends this file to solutions/ch11_flash_bwd/ch11_flash_bwd.cu, whose flash_bwd
// and flash_bwd_prep it renames, so it reuses that file's tiles, constants, last pass and helpers.
//
// Why. The chapter's kernel forms S = Q K^T with the queries as rows. dV += P^T dO and dK += dS^T Q want P
// and dS with the KEYS as rows, so P and dS make a trip through shared memory to be read transposed, and
// every product reads both operands from shared memory: the kernel is bound by shared-memory bandwidth
// (bench/results/ncu_ch11_vs_cudnn_fa4_*.md). Here each consumer computes the transposes directly,
//     S^T = K Q^T,  dP^T = V dO^T        (A = this consumer's 64 keys, B = the step's queries)
// and a wgmma accumulator, rounded to bf16, is exactly the register layout of a wgmma A operand (each warp
// 16 rows, the same fragment). So
//     dV += P^T dO,  dK += dS^T Q        read A from registers ("RS" wgmma): P never touches shared memory,
// and dS^T is stored once, for dQ = dS K, which both consumers need: each consumer forms one 64 x 64 quarter
// of the step's dQ over ALL 128 keys (A = dS read MN-major from both consumers' dS^T tiles, B = K read
// MN-major) and adds it with one TMA reduce-add: at d = 64 consumer c takes the query rows [64c, 64c + 64),
// at d = 128 the columns [64c, 64c + 64).
// The price: L and D now index the accumulator's COLUMNS (queries are columns). A lane holds 4 of every 16
// columns (rv.cuh's lane_t), so each thread needs a quarter of the step's values (32 of 128 at d = 64); they
// arrive by TMA with the step's Q and dO (a first pass lays them out in one box per step) and are read from
// shared memory, not from global memory by every thread.
// DQ_WRITER=1: one warp of the producer's warpgroup sends both quarters of every step (two reduce-adds), so
// a consumer never waits for the copy engine nor meets its own warps before the copy: it writes its quarter,
// its warps arrive on an mbarrier, and it goes on to the next step. DQ_WRITER=0: each consumer's first thread
// issues its own quarter's reduce-add, after a barrier of its warpgroup.
// Queries per step (QSTEP; FlashAttention-3's tiles): 128 at d = 64, where one wgmma of N = 128 reads K once
// for twice the queries and the registers allow it; 64 at d = 128, where dK and dV alone take 128 registers,
// or 80 (QSTEP=80: FlashAttention-3's non-causal tile), where S^T's wgmma read K once for 80 queries. 80 rows are
// no wgmma M, so there consumer c forms dQ^T's rows [64c, +64) = K^T dS^T (A: its 64 columns of K, B: dS^T,
// N = 80) and stores them transposed; dV and dK are waited for first, or the registers do not suffice.
#ifndef SWAPAB
#define SWAPAB 1
#endif
static_assert(CONSUMERS == 2 && DQ_MODE == 1, "the swapAB backward takes two consumers and the TMA reduce-add");
#ifndef DQ_WRITER
#define DQ_WRITER 1
#endif
#ifndef QSTEP
#define QSTEP (HEAD_DIM == 64 ? 128 : 64)  // queries per step: the N of S^T and dP^T
#endif
static_assert((HEAD_DIM == 64 && QSTEP == 128) || (HEAD_DIM == 128 && (QSTEP == 64 || QSTEP == 80)),
              "steps of 128 queries at d = 64, of 64 or 80 at d = 128");
constexpr bool DQ_BY_ROWS = QSTEP == 128;     // consumer c: dQ rows [64c, +64) (d = 64), else columns (d = 128)
constexpr bool DQ_TRANSPOSED = QSTEP == 80;   // ... formed as dQ^T's rows (80 queries are no wgmma M)
constexpr int DQ_ROWS = DQ_TRANSPOSED ? QSTEP : 64;  // rows of a consumer's dQ part in shared memory

using qstep_tile = st_bf<QSTEP, HEAD_DIM>;  // a step's Q or dO, loaded in TMA boxes (box_of below)
using dst_tile = st_bf<64, QSTEP>;          // one consumer's dS^T: its 64 keys x the step's queries (80: its
                                            // 160-byte rows take a 32-byte swizzle, the widest that divides)
using kq_acc = rt_fl<16, QSTEP>;            // a warp's 16 keys x the step's queries (S^T, dP^T)
using kq_bf = rt_bf<16, QSTEP>;             // the same in bf16: the A operand of dV and dK
using query_values = row_vec<kq_acc>;       // one value per query column, each lane's quarter of them

// The per-step statistics, as the first pass lays them out and TMA brings them: L in log2 units (L log2 e)
// for the step's queries, then D, each padded to STATS_LEN (a box's sides are multiples of 8). Per (batch,
// head) a fp32 matrix of 8 rows x STATS_LEN / 4 columns per step, so that one TMA box (no swizzle) is one
// step's. Queries past the end hold L = +inf (P = 0) and D = 0.
constexpr int STATS_LEN = (QSTEP + 31) / 32 * 32, STATS_ROWS = 8, STATS_COLS = STATS_LEN / 4;
struct alignas(128) step_stats {
    float l2[STATS_LEN], d[STATS_LEN];
};
static_assert(sizeof(step_stats) == STATS_ROWS * STATS_COLS * 4, "one TMA box per step");

struct swapab_layout {
    kv_tile k[CONSUMERS], v[CONSUMERS];
    qstep_tile q[STAGES], dout[STAGES];
    dst_tile ds[2][CONSUMERS];  // [step parity][whose]: two, so ONE barrier a step suffices (see the loop)
    st_fl<DQ_ROWS, 64> dq[CONSUMERS];  // each consumer's dQ part on its way to the reduce-add
    step_stats stats[STAGES];
    pipeline<STAGES> q_pipe;
    mbarrier kv_full;
    mbarrier dq_full, dq_empty;  // DQ_WRITER: both quarters written (8 warps) / sent (the writer)
};
extern "C" __device__ int flash_bwd_shared_bytes = dynamic_shared_bytes<swapab_layout>();
extern "C" __device__ int flash_bwd_qstep = QSTEP;

// ---- 1. the first pass: D = rowsum(dO o O) and L log2 e, laid out per step; the dQ accumulator zeroed ----
/// One warp per query row of the padded length (whole steps). stats: fp32 [b, h, steps x step_stats].
extern "C" __global__ void flash_bwd_prep(const bf16* o, const bf16* dout, const float* lse, float* stats,
                                          float* dq_acc, int heads, int seq, long o_sb, long o_sh, long o_sn,
                                          long do_sb, long do_sh, long do_sn) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, h = blockIdx.y, b = blockIdx.z;
    const int steps = (seq + QSTEP - 1) / QSTEP;
    if (row >= steps * QSTEP) return;
    const int lane = threadIdx.x % 32;
    const size_t bh = size_t(b) * heads + h;
    float sum = 0.0f;
    if (row < seq) {
        const bf16* orow = o + b * o_sb + h * o_sh + row * o_sn;
        const bf16* drow = dout + b * do_sb + h * do_sh + row * do_sn;
#pragma unroll
        for (int c = 2 * lane; c < HEAD_DIM; c += 64) {
            const float2 x = to_float2(*reinterpret_cast<const bf16_2*>(orow + c));
            const float2 y = to_float2(*reinterpret_cast<const bf16_2*>(drow + c));
            sum += x.x * y.x + x.y * y.y;
            *reinterpret_cast<float2*>(dq_acc + (bh * seq + row) * HEAD_DIM + c) = make_float2(0.0f, 0.0f);
        }
        for (int off = 16; off; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    }
    if (lane == 0) {
        step_stats& s = reinterpret_cast<step_stats*>(stats)[bh * steps + row / QSTEP];
        s.l2[row % QSTEP] = row < seq ? lse[bh * seq + row] * LOG2E : __int_as_float(0x7f800000);  // +inf
        s.d[row % QSTEP] = sum;
    }
}

// ---- 2. the main kernel ---------------------------------------------------------------------------------
/// TMA box j of a step tile, as a tile of its own: d = 64 loads 64-row boxes (one panel: 64 consecutive rows),
/// d = 128 one box of the whole step (tklab.kernels.attention_bwd makes the maps to match).
constexpr int STEP_BOXES = HEAD_DIM == 64 ? QSTEP / 64 : 1;
using step_box = st_bf<QSTEP / STEP_BOXES, HEAD_DIM>;
static_assert(STEP_BOXES == 1 || qstep_tile::panels == 1, "64-row blocks of a step tile are tiles");
__device__ inline step_box& box_of(qstep_tile& t, int j) { return reinterpret_cast<step_box*>(&t)[j]; }

/// This lane's query columns of a per-query vector in shared memory (lane_t: entries 16b + 2t + 8q, +1).
__device__ inline query_values column_values(const float* v) {
    query_values out;
    const int t = laneid() % 4;
#pragma unroll
    for (int b = 0; b < QSTEP / 16; ++b)
#pragma unroll
        for (int q = 0; q < 2; ++q) out.data[b][q] = *reinterpret_cast<const float2*>(v + 16 * b + 2 * t + 8 * q);
    return out;
}

/// dq (+)= consumer me's part of dS K over consumer g's keys, from g's dS^T and K tiles (the header).
template <typename Acc, typename DsTile, typename KTile>
__device__ inline void add_dq_part(Acc& dq, DsTile& ds, KTile& k, int me, bool accumulate) {
    if constexpr (DQ_TRANSPOSED) warpgroup::mma_AtB(dq, panel(k, me), ds, accumulate);  // dQ^T: its columns
    else if constexpr (DQ_BY_ROWS) warpgroup::mma_AtB(dq, panel(ds, me), k, accumulate);  // its queries
    else warpgroup::mma_AtB(dq, ds, panel(k, me), accumulate);                            // its columns
}

/// A consumer's dQ part into its tile for the reduce-add; dQ^T element by element, transposed.
template <typename Acc, typename Tile>
__device__ inline void store_dq(Tile& dst, const Acc& dq) {
    if constexpr (DQ_TRANSPOSED) {
        const int row0 = 16 * warpgroup::warp();  // this warp's rows of dQ^T: its columns of dQ
        for_each_pair(dq, [&](const float2& v, rc at, rc e0, rc e1) {
            dst(at.c + e0.c, row0 + at.r + e0.r) = v.x;
            dst(at.c + e1.c, row0 + at.r + e1.r) = v.y;
        });
    } else {
        warpgroup::store(dst, dq);
    }
}

/// Where consumer g's part of step i's dQ goes in the fp32 accumulator, in DQ_ROWS x 64 boxes.
__device__ inline coord4 dq_box(int b, int h, int i, int g) {
    return DQ_BY_ROWS ? coord4{b, h, 2 * i + g, 0} : coord4{b, h, i, g};
}

/// DQ_WRITER: the dQ writer (one lane of the producer's warp 1). Per step: wait until all consumer warps
/// wrote their quarters, add both into the accumulator, and once the copy engine has read them hand the
/// buffer back.
__device__ inline void write_dq(swapab_layout& sm, const CUtensorMap& map_dq, int heads, int seq, int causal) {
    const auto [kv, h, b] = coords(heads, seq);
    const int first = causal ? kv * KV_BLOCK / QSTEP : 0, steps = (seq + QSTEP - 1) / QSTEP;
    if (!warpgroup::elect_one()) return;
    for (int i = first; i < steps; ++i) {
        wait(sm.dq_full, uint32_t(i - first) & 1);
        for (int g = 0; g < CONSUMERS; ++g) tma::store_add_async(map_dq, sm.dq[g], dq_box(b, h, i, g));
        tma::store_commit();
        tma::store_wait_read<0>();
        arrive(sm.dq_empty);
    }
}

/// The producer: K and V once, then per step Q, dO (64-row boxes) and the step's L and D (one box).
__device__ inline void produce_steps(swapab_layout& sm, const CUtensorMap& map_q, const CUtensorMap& map_k,
                                     const CUtensorMap& map_v, const CUtensorMap& map_do,
                                     const CUtensorMap& map_stats, int heads, int seq, int causal) {
    const auto [kv, h, b] = coords(heads, seq);
    const int first = causal ? kv * KV_BLOCK / QSTEP : 0, steps = (seq + QSTEP - 1) / QSTEP;
    if (warpgroup::warp() != 0 || !warpgroup::elect_one()) return;
    arrive_expect_bytes(sm.kv_full, 2 * CONSUMERS * tma::bytes<kv_tile>);
    for (int w = 0; w < CONSUMERS; ++w) {
        tma::load_async(sm.k[w], map_k, sm.kv_full, {b, h, kv * CONSUMERS + w, 0});
        tma::load_async(sm.v[w], map_v, sm.kv_full, {b, h, kv * CONSUMERS + w, 0});
    }
    ring_cursor<STAGES> at;
    for (int i = first; i < steps; ++i, at.advance()) {
        mbarrier& full = sm.q_pipe.full[at.stage];
        wait(sm.q_pipe.empty[at.stage], at.phase ^ 1);
        arrive_expect_bytes(full, 2 * tma::bytes<qstep_tile> + sizeof(step_stats));
        for (int j = 0; j < STEP_BOXES; ++j) {
            tma::load_async(box_of(sm.q[at.stage], j), map_q, full, {b, h, STEP_BOXES * i + j, 0});
            tma::load_async(box_of(sm.dout[at.stage], j), map_do, full, {b, h, STEP_BOXES * i + j, 0});
        }
        tma::load_box(&sm.stats[at.stage], map_stats, full, b, h, STATS_ROWS * i, 0);
    }
}

extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * 128, 1)
flash_bwd(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
          const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_do,
          const __grid_constant__ CUtensorMap map_dk, const __grid_constant__ CUtensorMap map_dv,
          const __grid_constant__ CUtensorMap map_dq, const __grid_constant__ CUtensorMap map_stats,
          int heads, int seq, float scale, int causal) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    swapab_layout& sm = alloc.take<swapab_layout>();
    if (threadIdx.x == 0) {
        sm.q_pipe.init(CONSUMERS * warpgroup::WARPS);
        init_mbarrier(sm.kv_full, 1);
        init_mbarrier(sm.dq_full, CONSUMERS * warpgroup::WARPS);
        init_mbarrier(sm.dq_empty, 1);
        fence_mbarrier_init();
    }
    __syncthreads();
    if (warpgroup::groupid() == 0) {
        split::producer();
        if (warpgroup::warp() == 0) produce_steps(sm, map_q, map_k, map_v, map_do, map_stats, heads, seq, causal);
        if (DQ_WRITER && warpgroup::warp() == 1) write_dq(sm, map_dq, heads, seq, causal);
        return;
    }

    split::consumer();
    const auto [kv, h, b] = coords(heads, seq);
    const int first = causal ? kv * KV_BLOCK / QSTEP : 0, steps = (seq + QSTEP - 1) / QSTEP;
#if UNIFORM
    const int me = __shfl_sync(0xffffffffu, warpgroup::groupid() - 1, 0), w = warpgroup::warp();
#else
    const int me = warpgroup::groupid() - 1, w = warpgroup::warp();
#endif
    const int key0 = kv * KV_BLOCK + me * 64 + 16 * w;  // this warp's first key: its rows of S^T
    const float c = scale * LOG2E;
    const bool issuer = warpgroup::threadid() == 0;
    using both = warpgroup::named_barrier<CONSUMERS_BARRIER, CONSUMERS * warpgroup::THREADS>;
    rt_fl<16, HEAD_DIM> dk, dv;
    rt_fl<16, DQ_ROWS> dq;  // this consumer's quarter of the step's dQ (QSTEP=80: 64 rows of dQ^T)
    zero(dk);
    zero(dv);
    kq_acc s, dp;  // S^T, then P^T in place; dP^T, then dS^T in place
    kq_bf p, ds;
    ring_cursor<STAGES> at;
    wait(sm.kv_full, 0);
    for (int i = first, x = 0; i < steps; ++i, x ^= 1, at.advance()) {
        const int stage = at.stage;
        wait(sm.q_pipe.full[stage], at.phase);
        warpgroup::mm_ABt(s, sm.k[me], sm.q[stage]);      // S^T  = K Q^T
        warpgroup::mm_ABt(dp, sm.v[me], sm.dout[stage]);  // dP^T = V dO^T
        // P^T while dP^T is still on the tensor cores. Keys past the end need no mask: their K and V rows
        // arrived as zeros, so they add nothing to dQ, and their dK, dV rows are never written.
        warpgroup::mma_async_wait<1>(s);
        map_col(s, s, column_values(sm.stats[stage].l2), [c](float v, float l) { return fast::exp2(c * v - l); });
        if (causal && key0 + 15 > i * QSTEP)  // the diagonal step: a query sees no later key
            mask_if(s, key0, i * QSTEP, [](int k, int r) { return k > r; }, 0.0f);
        warpgroup::mma_async_wait<0>(dp);
        map_col(dp, dp, column_values(sm.stats[stage].d), [](float v, float d) { return v - d; });
        mul(dp, dp, s);  // dS^T = P^T o (dP^T - D)
        copy(p, s);
        copy(ds, dp);
        warpgroup::mma_AB(dv, p, sm.dout[stage]);  // dV += P^T dO  (A from registers)
        warpgroup::mma_AB(dk, ds, sm.q[stage]);    // dK += dS^T Q
        // dS^T to shared memory while dV and dK run: the other consumer's dQ needs it. Buffer x was last
        // read by both consumers' dQ two steps ago, and each waited for that dQ before the previous step's
        // barrier, which this thread has passed: so one barrier a step (the next one) is all it takes.
        tk::store(sm.ds[x][me], ds, {w, 0});
        fence_proxy_async();
        if (!DQ_WRITER && issuer) tma::store_wait_read<0>();  // the last dQ quarter has left sm.dq[me]
        both::sync();
        // dQ's quarter: dS (the step's queries x both consumers' keys, summed over g) times K.
        if constexpr (DQ_TRANSPOSED) warpgroup::mma_async_wait<0>(dv, dk, p, ds);  // P^T, dS^T's registers free
#pragma unroll
        for (int g = 0; g < CONSUMERS; ++g) add_dq_part(dq, sm.ds[x][g], sm.k[g], me, g > 0);
        warpgroup::mma_async_wait<0>(dv, dk, dq, p, ds);
        sm.q_pipe.release(stage);
        if constexpr (DQ_WRITER) wait(sm.dq_empty, (uint32_t(i - first) & 1) ^ 1);  // the last step's was sent
        store_dq(sm.dq[me], dq);
        fence_proxy_async();
        if constexpr (DQ_WRITER) {
            arrive_warp(sm.dq_full);
        } else {
            warpgroup::sync_group<STORE_BARRIERS, CONSUMERS>(me);
            if (issuer) {
                tma::store_add_async(map_dq, sm.dq[me], dq_box(b, h, i, me));
                tma::store_commit();
            }
        }
    }

    // Epilogue: dK, dV out through this consumer's K and V tiles, once the OTHER consumer's last dQ has
    // read k[me] too.
    mul(dk, dk, scale);
    both::sync();
    warpgroup::store(sm.k[me], dk);
    warpgroup::store(sm.v[me], dv);
    fence_proxy_async();
    warpgroup::sync_group<STORE_BARRIERS, CONSUMERS>(me);
    if (issuer) {
        tma::store_async(map_dk, sm.k[me], {b, h, kv * CONSUMERS + me, 0});
        tma::store_async(map_dv, sm.v[me], {b, h, kv * CONSUMERS + me, 0});
        tma::store_commit();
        tma::store_wait_read<0>();  // (without DQ_WRITER also the last dQ quarter's read)
    }
}
