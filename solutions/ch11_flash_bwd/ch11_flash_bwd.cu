// Chapter 11 solution: FlashAttention backward for Hopper, with the KEYS as rows (FlashAttention-3's layout).
//
// The forward kept, for every query row, L = log(sum_j exp(scale * S_ij)). That is all the backward needs to
// rebuild the probabilities one block at a time, never the N x N matrix:
//     P  = exp(scale * Q K^T - L)              (recomputed; exp2 with log2(e) folded in)
//     dP = dO V^T
//     dS = P o (dP - D),  D = rowsum(dO o O)   (one number per query row, from the first pass)
//     dV = P^T dO,   dK = scale * dS^T Q,   dQ = scale * dS K
// dV and dK want P and dS with the KEYS as rows. So each consumer forms the transposes directly,
//     S^T = K Q^T,   dP^T = V dO^T         (A = this consumer's 64 keys, B = the step's queries)
// and a wgmma accumulator rounded to bf16 is exactly the register layout of a wgmma A operand (each warp 16
// rows, the same fragment): dV += P^T dO and dK += dS^T Q read A from registers ("RS" wgmma), and P never
// touches shared memory. dS^T is stored once, for dQ = dS K, which both consumers need.
//
// Three kernels, launched in this order (tklab/kernels/attention_bwd.py):
//   flash_bwd_prep  per query: L log2(e) and D = rowsum(dO o O), laid out per step for TMA; dQ's fp32
//                   accumulator zeroed;
//   flash_bwd       one block per KV_BLOCK = 128 keys of one head: K and V stay in shared memory while the block
//                   walks over the query steps that see them; dK and dV accumulate in registers and are written
//                   once; every key block ADDS its share of a step's dQ into the accumulator (TMA reduce-add);
//   flash_bwd_dq    dQ = scale * accumulator, rounded to bf16.
// flash_bwd's roles (warp specialisation, chapter 10): warpgroup 0 is the PRODUCER (warp 0: K and V once, then
// each step's Q, dO, L and D by TMA into a ring of STAGES; warp 1: the dQ WRITER, both consumers' parts
// added per step);
// two CONSUMER warpgroups each own 64 of the block's keys.
// Queries per step (QSTEP): 128 at d = 64 (one wgmma of N = 128 reads K once for twice the queries); 64 at
// d = 128, where dK and dV alone take 128 registers; or 80 (QSTEP=80): 80 rows are no wgmma M, so consumer c
// forms dQ^T's rows [64c, +64) = K^T dS^T and stores them transposed.
// dQ's last bits depend on the order the key blocks' reduce-adds land: not bit-for-bit reproducible from run to
// run (dK and dV are). DETERMINISTIC=1 fixes the order: an int32 counter per (batch, head, step), zeroed by the
// first pass, lets the key blocks add a step's dQ in blockIdx order (write_dq; tk/hopper/turns.cuh), for no
// memory beyond the counters. It costs time, hence opt-in: a block waits at every step for the blocks before it to
// have added theirs, and for its own adds to land in global memory before it passes the turn on. Under a causal mask
// the blocks run from the last key block (this_block), the order in which they reach each step (bench/flash_bwd.py
// times it, "ch11 deterministic").
//
// Layouts: Q, K, V, O, dO, dQ, dK, dV bf16 [batch, heads, seq, HEAD_DIM] (rank-4 TMA maps, so any strides with
// a contiguous last dimension; tiles past the end of a head read zeros and are not written back); the dQ
// accumulator fp32 [batch, heads, seq, HEAD_DIM], or with DQ_FRAGMENTS [batch, heads, whole steps x QSTEP,
// HEAD_DIM], each step two parts in register order; the per-step statistics: see step_stats.
#include "tk.cuh"
#include "tk/hopper/tma_reduce.cuh"  // TMA reduce-add with rank-4 coordinates
#include "tk/hopper/turns.cuh"       // DETERMINISTIC: turns in global memory
#include "tk/types/shared/panel.cuh"  // one 64-column panel of a tile as a tile
#include "tk/ops/warpgroup/fragments.cuh"  // DQ_FRAGMENTS: an accumulator parked in register order

using namespace tk;

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef STAGES
#define STAGES 2  // (Q, dO, L, D) stages in the ring
#endif
#ifndef DQ_WRITER
#define DQ_WRITER 1  // 1: a warp of the producer sends dQ; 0: each consumer sends its own part
#endif
#ifndef QSTEP
#define QSTEP (HEAD_DIM == 64 ? 128 : 64)  // queries per step: the N of S^T and dP^T
#endif
#ifndef UNIFORM
#define UNIFORM (HEAD_DIM == 128)  // 1: the consumer index from a shuffle (its descriptors in uniform registers)
#endif
#ifndef DQ_FRAGMENTS
// 1: each consumer parks its dQ part in shared memory as it sits in registers (one 16-byte store per 4 registers,
// no swizzled addresses); the copy engine adds the parts as they are into an accumulator kept in that order, and
// the last pass reads each back into the register tile it came from (tk/ops/warpgroup/fragments.cuh). On the H200
// it ran 2.7-9.2 % faster at d = 128 and 1.1-3.3 % slower at d = 64 (bench/results/flash_bwd_*_fragments*.md).
#define DQ_FRAGMENTS (HEAD_DIM == 128)
#endif
#ifndef DETERMINISTIC
#define DETERMINISTIC 0  // 1: the key blocks add each step's dQ in their order (see write_dq)
#endif
#if DETERMINISTIC  // one more argument of flash_bwd_prep (zeroes them) and flash_bwd: the turn counters
#define TURNS_PARAM , int* dq_turns
#else
#define TURNS_PARAM
constexpr int* dq_turns = nullptr;
#endif
// Options tklab.kernels.attention_bwd passes for every build; this kernel is written for these values.
#if defined(SWAPAB) && SWAPAB != 1
#error "SWAPAB=0 names solutions/variants/ch11_bwd_rows.cu, not this file"
#endif
#ifndef CONSUMERS
#define CONSUMERS 2
#endif
#ifndef DQ_MODE
#define DQ_MODE 1
#endif
static_assert(CONSUMERS == 2 && DQ_MODE == 1, "two consumer warpgroups, dQ added by TMA reduce-add");
static_assert(!DETERMINISTIC || DQ_WRITER, "the turns are the dQ writer's");
static_assert((HEAD_DIM == 64 && QSTEP == 128) || (HEAD_DIM == 128 && (QSTEP == 64 || QSTEP == 80)),
              "steps of 128 queries at d = 64, of 64 or 80 at d = 128");
constexpr int KV_BLOCK = 64 * CONSUMERS;      // keys per block
constexpr float LOG2E = 1.4426950408889634f;
constexpr bool DQ_BY_ROWS = QSTEP == 128;     // consumer c: dQ rows [64c, +64) (d = 64), else columns (d = 128)
constexpr bool DQ_TRANSPOSED = QSTEP == 80;   // ... formed as dQ^T's rows (80 queries are no wgmma M)
constexpr int DQ_ROWS = DQ_TRANSPOSED ? QSTEP : 64;  // rows of a consumer's dQ part in shared memory
static_assert(2 * DQ_ROWS * 64 == QSTEP * HEAD_DIM, "a step's two dQ parts are its QSTEP x HEAD_DIM floats");
// Named barriers (0 is __syncthreads): both consumers together (1); each consumer alone before its TMA stores
// (5, 6). Checked disjoint, so an option that shifts one stops the build.
constexpr int CONSUMERS_BARRIER = 1, STORE_BARRIERS = 5;
constexpr warpgroup::barrier_ids consumers_ids{CONSUMERS_BARRIER, 1}, store_ids{STORE_BARRIERS, CONSUMERS};
TK_BARRIERS_DISJOINT(consumers_ids, store_ids);
// Two consumers need more than the 168 registers a 384-thread block gets evenly (d = 128: dK and dV are 64
// fp32 registers each, S^T and dP^T 32 each, dQ's part 32): the producer gives its registers to them.
using split = warpgroup::register_split<24, 240, 2>;

using kv_tile = st_bf<64, HEAD_DIM>;        // one consumer's K or V rows (later its dK, dV on the way out)
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

struct smem_layout {
    kv_tile k[CONSUMERS], v[CONSUMERS];
    qstep_tile q[STAGES], dout[STAGES];
    dst_tile ds[2][CONSUMERS];  // [step parity][whose]: two, so ONE barrier a step suffices
    st_fl<DQ_ROWS, 64> dq[CONSUMERS];  // each consumer's dQ part on its way to the reduce-add
    step_stats stats[STAGES];
    pipeline<STAGES> q_pipe;
    mbarrier kv_full;
    mbarrier dq_full, dq_empty;  // DQ_WRITER: both parts written (8 warps) / sent (the writer)
};
/// What tklab.kernels.attention_bwd reads from the module: flash_bwd's dynamic shared memory and its geometry.
extern "C" __device__ int flash_bwd_shared_bytes = dynamic_shared_bytes<smem_layout>();
extern "C" __device__ int flash_bwd_qstep = QSTEP;
extern "C" __device__ int flash_bwd_kv_block = KV_BLOCK;
extern "C" __device__ int flash_bwd_threads = (CONSUMERS + 1) * 128;

// ---- 1. the first pass: D = rowsum(dO o O) and L log2 e, laid out per step; the dQ accumulator zeroed ----
/// One warp per query row of the padded length (whole steps). stats: fp32 [b, h, steps x step_stats];
/// DETERMINISTIC: dq_turns int32 [b, h, steps].
extern "C" __global__ void flash_bwd_prep(const bf16* o, const bf16* dout, const float* lse, float* stats,
                                          float* dq_acc, int heads, int seq, long o_sb, long o_sh, long o_sn,
                                          long do_sb, long do_sh, long do_sn TURNS_PARAM) {
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
        for (int c = 2 * lane; c < HEAD_DIM; c += 64) {  // a pair of neighbours per lane and step
            const float2 x = to_float2(*reinterpret_cast<const bf16_2*>(orow + c));
            const float2 y = to_float2(*reinterpret_cast<const bf16_2*>(drow + c));
            sum += x.x * y.x + x.y * y.y;
            if (!DQ_FRAGMENTS)
                *reinterpret_cast<float2*>(dq_acc + (bh * seq + row) * HEAD_DIM + c) = make_float2(0.0f, 0.0f);
        }
        for (int off = 16; off; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    }
    if (DQ_FRAGMENTS) {  // the accumulator in whole steps, in the parts' order: zeroed as one flat range
        for (int c = 2 * lane; c < HEAD_DIM; c += 64)
            *reinterpret_cast<float2*>(dq_acc + (bh * steps * QSTEP + row) * HEAD_DIM + c) = make_float2(0.0f, 0.0f);
    }
    if (lane == 0) {
        step_stats& s = reinterpret_cast<step_stats*>(stats)[bh * steps + row / QSTEP];
        s.l2[row % QSTEP] = row < seq ? lse[bh * seq + row] * LOG2E : __int_as_float(0x7f800000);  // +inf
        s.d[row % QSTEP] = sum;
        if (DETERMINISTIC && row % QSTEP == 0) dq_turns[bh * steps + row / QSTEP] = 0;  // the first adder's turn
    }
}

// ---- 3. the last pass: dQ = scale * accumulator, in bf16 ---------------------------------------------
#if DQ_FRAGMENTS
/// One 128-thread block per consumer part of a step (blockIdx.x = 2 step + consumer), parked by the main kernel in
/// register order: read back into the register tile it came from, each value then to its (query, column) of dQ.
extern "C" __global__ void flash_bwd_dq(const float* dq_acc, bf16* dq, int heads, int seq, long sb, long sh,
                                        long sn, float scale, int causal) {
    const int i = blockIdx.x / 2, g = blockIdx.x % 2, h = blockIdx.y, b = blockIdx.z;
    const int steps = (seq + QSTEP - 1) / QSTEP;
    rt_fl<16, DQ_ROWS> part;  // warp w: rows 16w.. of the consumer's 64 x DQ_ROWS accumulator, as it held them
    warpgroup::load_fragments(part, dq_acc + ((size_t(b) * heads + h) * steps * 2 + blockIdx.x) * (64 * DQ_ROWS));
    const int row0 = 16 * warpgroup::warp();
    bf16* out = dq + b * sb + h * sh;
    for_each_pair(part, [&](const float2& v, rc at, rc e0, rc e1) {
        const int r = row0 + at.r + e0.r, c = at.c + e0.c;  // e1: the next column, (r, c + 1)
        if constexpr (DQ_TRANSPOSED) {  // rows: columns 64g + r of dQ; columns: the step's queries
            const int query = i * QSTEP + c;
            if (query < seq) out[query * sn + 64 * g + r] = from_float<bf16>(scale * v.x);
            if (query + 1 < seq) out[(query + 1) * sn + 64 * g + r] = from_float<bf16>(scale * v.y);
        } else {  // rows: queries (d = 64: the step's 64g..; d = 128: all 64), columns (d = 128: 64g..)
            const int query = i * QSTEP + (DQ_BY_ROWS ? 64 * g : 0) + r, col = (DQ_BY_ROWS ? 0 : 64 * g) + c;
            if (query < seq)
                *reinterpret_cast<bf16_2*>(out + query * sn + col) = from_float2<bf16>(make_float2(scale * v.x, scale * v.y));
        }
    });
}
#else
/// One thread per pair of elements of one row; dq: element strides (batch, head, row).
extern "C" __global__ void flash_bwd_dq(const float* dq_acc, bf16* dq, int heads, int seq, long sb, long sh,
                                        long sn, float scale, int causal) {
    constexpr int PAIRS = HEAD_DIM / 2;
    const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;  // pair index in this (batch, head)
    const int h = blockIdx.y, b = blockIdx.z;
    if (i >= long(seq) * PAIRS) return;
    const int row = int(i / PAIRS), c = int(i % PAIRS) * 2;
    const float2 x = *reinterpret_cast<const float2*>(dq_acc + ((size_t(b) * heads + h) * seq + row) * HEAD_DIM + c);
    *reinterpret_cast<bf16_2*>(dq + b * sb + h * sh + row * sn + c) = from_float2<bf16>(make_float2(scale * x.x, scale * x.y));
}
#endif

// ---- 2. the main kernel ---------------------------------------------------------------------------------
/// This block's key block, head and batch. Each role calls it after its register split: values computed
/// before setmaxnreg and live across it are kept on the stack by ptxas.
/// DETERMINISTIC under a causal mask: the last key block first. Key block j starts at its first step (steps_of), so
/// of the blocks that add to a step the last one gets there first; taking the turns in that order (write_dq), and
/// launching the blocks in it, a block seldom waits, and only ever for blocks launched before it.
struct block_coords {
    int kv, h, b;
};
__device__ inline block_coords this_block(int causal) {
    const int x = DETERMINISTIC && causal ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
    return {x, int(blockIdx.y), int(blockIdx.z)};
}

/// The query steps a key block walks: all of them, or under a causal mask those at or after its first key.
struct step_range {
    int first, end;
};
__device__ inline step_range steps_of(int kv, int seq, int causal) {
    return {causal ? kv * KV_BLOCK / QSTEP : 0, (seq + QSTEP - 1) / QSTEP};
}

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

/// dq (+)= consumer me's part of dS K over consumer g's keys, from g's dS^T tile and K tile. Both operands are
/// read MN-major (the transpose flag of wgmma): dS's rows are the step's queries, dS^T's columns.
template <typename Acc, typename DsTile, typename KTile>
__device__ inline void add_dq_part(Acc& dq, DsTile& ds_t, KTile& k, int me, bool accumulate) {
    if constexpr (DQ_TRANSPOSED) warpgroup::mma_AtB(dq, panel(k, me), ds_t, accumulate);  // dQ^T: its columns
    else if constexpr (DQ_BY_ROWS) warpgroup::mma_AtB(dq, panel(ds_t, me), k, accumulate);  // its queries
    else warpgroup::mma_AtB(dq, ds_t, panel(k, me), accumulate);                            // its columns
}

/// A consumer's dQ part into its tile for the reduce-add: in register order (DQ_FRAGMENTS), else at its (row,
/// column), dQ^T element by element, transposed.
template <typename Acc, typename Tile>
__device__ inline void store_dq(Tile& dst, const Acc& dq) {
    if constexpr (DQ_FRAGMENTS) {
        warpgroup::store_fragments(&dst, dq);  // as it sits in registers: the last pass puts it in place
    } else if constexpr (DQ_TRANSPOSED) {
        const int row0 = 16 * warpgroup::warp();  // this warp's rows of dQ^T: its columns of dQ
        for_each_pair(dq, [&](const float2& v, rc base, rc e0, rc e1) {
            dst(base.c + e0.c, row0 + base.r + e0.r) = v.x;
            dst(base.c + e1.c, row0 + base.r + e1.r) = v.y;
        });
    } else {
        warpgroup::store(dst, dq);
    }
}

/// Where consumer g's part of step i's dQ goes in the fp32 accumulator, in DQ_ROWS x 64 boxes.
__device__ inline coord4 dq_box(int b, int h, int i, int g) {
    return DQ_BY_ROWS ? coord4{b, h, 2 * i + g, 0} : coord4{b, h, i, g};
}

/// Add consumer g's part of step i's dQ into the accumulator (one thread). DQ_FRAGMENTS: the accumulator seen as
/// rows of 64 floats (an unswizzled map), part (i, g) its (2i + g)-th block of DQ_ROWS rows, in register order.
template <typename Tile>
__device__ inline void send_dq_part(const CUtensorMap& map_dq, const Tile& part, int b, int h, int i, int g) {
    if constexpr (DQ_FRAGMENTS) tma::store_add_box(map_dq, &part, b, h, (2 * i + g) * DQ_ROWS, 0);
    else tma::store_add_async(map_dq, part, dq_box(b, h, i, g));
}

/// DQ_WRITER: the dQ writer (one lane of the producer's warp 1). Per step: wait until all consumer warps
/// wrote their parts, add both into the accumulator, and once the copy engine has read them hand the buffer back.
/// DETERMINISTIC: the key blocks that reach step i are 0, 1, .. up to the last whose first step is <= i (steps_of).
/// This block's rank among them is its place in launch order (this_block): kv, after key block kv - 1; under a causal
/// mask last - kv, after key block kv + 1. It waits only for blocks launched before it.
__device__ inline void write_dq(smem_layout& sm, const CUtensorMap& map_dq, int heads, int seq, int causal,
                                int* turns) {
    const auto [kv, h, b] = this_block(causal);
    const auto [first, end] = steps_of(kv, seq, causal);
    if (!warpgroup::elect_one()) return;
    const size_t bh_steps = (size_t(b) * heads + h) * end;  // DETERMINISTIC: this head's step 0 counter
    for (int i = first; i < end; ++i) {
        if constexpr (DETERMINISTIC) {  // the adders before this block have added step i
            const int last = min(int(gridDim.x) - 1, ((i + 1) * QSTEP - 1) / KV_BLOCK);  // the last whose first is <= i
            turn::wait_for(turns + bh_steps + i, causal ? last - kv : kv);
        }
        wait(sm.dq_full, uint32_t(i - first) & 1);
        for (int g = 0; g < CONSUMERS; ++g) send_dq_part(map_dq, sm.dq[g], b, h, i, g);
        tma::store_commit();
        tma::store_wait_read<0>();
        arrive(sm.dq_empty);
        if constexpr (DETERMINISTIC) turn::pass_after_bulk_stores(turns + bh_steps + i);  // once the adds have landed
    }
}

/// The producer: K and V once, then per step Q, dO (in boxes) and the step's L and D (one box).
__device__ inline void produce_steps(smem_layout& sm, const CUtensorMap& map_q, const CUtensorMap& map_k,
                                     const CUtensorMap& map_v, const CUtensorMap& map_do,
                                     const CUtensorMap& map_stats, int seq, int causal) {
    const auto [kv, h, b] = this_block(causal);
    const auto [first, end] = steps_of(kv, seq, causal);
    if (warpgroup::warp() != 0 || !warpgroup::elect_one()) return;
    arrive_expect_bytes(sm.kv_full, 2 * CONSUMERS * tma::bytes<kv_tile>);
    for (int w = 0; w < CONSUMERS; ++w) {
        tma::load_async(sm.k[w], map_k, sm.kv_full, {b, h, kv * CONSUMERS + w, 0});
        tma::load_async(sm.v[w], map_v, sm.kv_full, {b, h, kv * CONSUMERS + w, 0});
    }
    ring_cursor<STAGES> ring;
    for (int i = first; i < end; ++i, ring.advance()) {
        mbarrier& full = sm.q_pipe.full[ring.stage];
        wait(sm.q_pipe.empty[ring.stage], ring.phase ^ 1);
        arrive_expect_bytes(full, 2 * tma::bytes<qstep_tile> + sizeof(step_stats));
        for (int j = 0; j < STEP_BOXES; ++j) {
            tma::load_async(box_of(sm.q[ring.stage], j), map_q, full, {b, h, STEP_BOXES * i + j, 0});
            tma::load_async(box_of(sm.dout[ring.stage], j), map_do, full, {b, h, STEP_BOXES * i + j, 0});
        }
        tma::load_box(&sm.stats[ring.stage], map_stats, full, b, h, STATS_ROWS * i, 0);
    }
}

extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * 128, 1)
flash_bwd(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
          const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_do,
          const __grid_constant__ CUtensorMap map_dk, const __grid_constant__ CUtensorMap map_dv,
          const __grid_constant__ CUtensorMap map_dq, const __grid_constant__ CUtensorMap map_stats,
          int heads, int seq, float scale, int causal TURNS_PARAM) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    smem_layout& sm = alloc.take<smem_layout>();
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
        if (warpgroup::warp() == 0) produce_steps(sm, map_q, map_k, map_v, map_do, map_stats, seq, causal);
        if (DQ_WRITER && warpgroup::warp() == 1) write_dq(sm, map_dq, heads, seq, causal, dq_turns);
        return;
    }

    // ---- consumers: warpgroup `me` owns keys kv * KV_BLOCK + 64 me .. + 63; warp w 16 of them ----
    split::consumer();
    const auto [kv, h, b] = this_block(causal);
    const auto [first, end] = steps_of(kv, seq, causal);
#if UNIFORM
    // The same in every lane (lane 0's, by a shuffle), so the compiler keeps the addresses of k[me], v[me] and
    // their wgmma descriptors in uniform registers instead of moving them over (R2UR) before each wgmma.
    const int me = __shfl_sync(0xffffffffu, warpgroup::groupid() - 1, 0), w = warpgroup::warp();
#else
    const int me = warpgroup::groupid() - 1, w = warpgroup::warp();
#endif
    const int key0 = kv * KV_BLOCK + me * 64 + 16 * w;  // this warp's first key: its rows of S^T
    const float scale_log2 = scale * LOG2E;             // P^T = exp2(scale_log2 S^T - L log2 e)
    const bool issuer = warpgroup::threadid() == 0;
    using both = warpgroup::named_barrier<CONSUMERS_BARRIER, CONSUMERS * warpgroup::THREADS>;
    rt_fl<16, HEAD_DIM> dk, dv;
    rt_fl<16, DQ_ROWS> dq;  // this consumer's part of the step's dQ (QSTEP=80: 64 rows of dQ^T)
    zero(dk);
    zero(dv);
    kq_acc s_t, dp_t;       // S^T and dP^T: this warp's 16 keys x the step's queries, fp32
    kq_bf p_t16, ds_t16;    // P^T and dS^T in bf16, the register A operands of dV and dK
    ring_cursor<STAGES> ring;
    wait(sm.kv_full, 0);
    warpgroup::equal_steps<CONSUMERS_BARRIER, CONSUMERS>(me, end - first);  // both meet every step (debug check)
    for (int i = first, buf = 0; i < end; ++i, buf ^= 1, ring.advance()) {
        const int stage = ring.stage;
        wait(sm.q_pipe.full[stage], ring.phase);
        if (!DQ_WRITER && issuer) tma::store_wait_read<0>();  // the last dQ part has left sm.dq[me]

        // BEGIN SOLUTION hint: with this consumer's K and V and the step's Q, dO, L and D in shared memory, issue this step's share of dV and dK, and form this consumer's part of the step's dQ in dq, with the keys as rows; the code after yours stores dq to shared memory, then waits for every group and hands the stage back
        warpgroup::mm_ABt(s_t, sm.k[me], sm.q[stage]);      // S^T  = K Q^T
        warpgroup::mm_ABt(dp_t, sm.v[me], sm.dout[stage]);  // dP^T = V dO^T
        // P^T while dP^T is still on the tensor cores. Keys past the end need no mask: their K and V rows
        // arrived as zeros, so they add nothing to dQ, and their dK, dV rows are never written.
        warpgroup::mma_async_wait<1>(s_t);
        kq_acc& p_t = s_t;  // P^T, in place: one value per (key, query), L per query column
        map_col(p_t, s_t, column_values(sm.stats[stage].l2),
                [scale_log2](float s, float l) { return fast::exp2(scale_log2 * s - l); });
        if (causal && key0 + 15 > i * QSTEP)  // the diagonal step: a query sees no later key
            mask_if(p_t, key0, i * QSTEP, [](int key, int query) { return key > query; }, 0.0f);
        warpgroup::mma_async_wait<0>(dp_t);
        kq_acc& ds_t = dp_t;  // dS^T = P^T o (dP^T - D), in place
        map_col(ds_t, dp_t, column_values(sm.stats[stage].d), [](float dp, float d) { return dp - d; });
        mul(ds_t, ds_t, p_t);
        copy(p_t16, p_t);
        copy(ds_t16, ds_t);
        warpgroup::mma_AB(dv, p_t16, sm.dout[stage]);  // dV += P^T dO  (A from registers)
        // dS^T to shared memory while dV runs, for the other consumer's dQ. Buffer buf was last read by both
        // consumers' dQ two steps ago, and each waited for that dQ before the previous step's barrier, which this
        // thread has passed: so one barrier a step (the next one) is all it takes.
        tk::store(sm.ds[buf][me], ds_t16, {w, 0});
        fence_proxy_async();  // our ordinary stores, then wgmma (the async proxy) reads them
        both::sync();
        // dQ's part first: dS (the step's queries x both consumers' keys, summed over g) times K. Then dK, whose A
        // operand dS^T is still in registers (no instruction may touch a wgmma's A registers until its group is
        // waited for, which the store above did before it was issued). Groups retire in order, so waiting until one
        // is left retires dV and dQ's part while dK still runs: dQ's part goes to shared memory under dK.
        if constexpr (DQ_TRANSPOSED) warpgroup::mma_async_wait<0>(dv, p_t16);  // registers free for dQ^T
#pragma unroll
        for (int g = 0; g < CONSUMERS; ++g) add_dq_part(dq, sm.ds[buf][g], sm.k[g], me, g > 0);
        warpgroup::mma_AB(dk, ds_t16, sm.q[stage]);    // dK += dS^T Q, last
        warpgroup::mma_async_wait<1>(dv, dq, p_t16);   // dV and dQ's part done; dK may still run
        // END SOLUTION
        if constexpr (DQ_WRITER) wait(sm.dq_empty, (uint32_t(i - first) & 1) ^ 1);  // the last step's was sent
        store_dq(sm.dq[me], dq);
        fence_proxy_async();
        if constexpr (DQ_WRITER) {
            arrive_warp(sm.dq_full);
        } else {
            warpgroup::sync_group<STORE_BARRIERS, CONSUMERS>(me);
            if (issuer) {
                send_dq_part(map_dq, sm.dq[me], b, h, i, me);
                tma::store_commit();
            }
        }
        warpgroup::mma_async_wait<0>(dk, ds_t16);
        sm.q_pipe.release(stage);  // Q, dO, L and D read by every product of the step
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
        tma::store_wait_read<0>();  // (without DQ_WRITER also the last dQ part's read)
    }
}
