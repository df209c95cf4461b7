// Chapter 10's kernel with two options of its softmax, off in the chapter's kernel until measured faster:
// solutions/ch10_flash/ch10_flash.cu plus solutions/variants/ch10_softmax_split.patch (python -m tklab exercises
// --derive writes it); tklab.attention.build(..., EXP2_SPLIT=n or MASK_SPLIT=1) compiles this file, and
// bench/flash_fwd.py's "split" variants measure it. Both set to 0, it compiles to the chapter kernel's SASS.
//   EXP2_SPLIT=n (0-8): of the 8 scores a lane holds in each 16 x 16 subtile, n are exponentiated by
//     fast::exp2_poly (a cubic on the FMA pipe) and 8 - n by MUFU's ex2. At d = 64 MUFU is the busiest pipe
//     after the tensor cores while the FMA and ALU pipes have room: this moves a share of its work to them.
//   MASK_SPLIT=1 (SCHEDULE 1 or 2): the key loop runs as two loops, first the blocks that need no mask in any
//     of the consumer's rows (not on the causal diagonal, not past the sequence's end) through a body without
//     the mask code and without the guard for rows that saw no key yet, then the rest through the masked body.
//
// The chapter's kernel:
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
// A consumer's index comes from a shuffle (__shfl_sync from lane 0), which tells the compiler that it is the
// same in all its lanes: its Q tile's address and the wgmma descriptors then live in uniform registers,
// computed once, instead of being rebuilt in ordinary registers and moved over (R2UR) before every wgmma of
// S = Q K^T.
// A persistent grid (one block per SM walking the work items) is solutions/variants/ch10_persistent.cu, this
// kernel plus a patch: it gained at some shapes and lost at others, so the chapter keeps this grid.
// Q, K, V, O: bf16 [batch, heads, seq, HEAD_DIM], any strides (rank-4 TMA maps: tiles past the end of a
// head read zeros and are not written back); L: fp32 [batch, heads, seq].
#include "tk.cuh"
#include "tk/ops/warp/online_softmax.cuh"  // chapter 09's update, packaged (not in tk.cuh)

using namespace tk;

// HEAD_DIM (64 or 128), CONSUMERS (consumer warpgroups, 64 query rows each), BC (keys per block), STAGES
// and SCHEDULE have one home: tklab.attention.DEFAULTS, which passes each with -D (and launches with the
// same values: tensor-map boxes, shared memory). No second value here that could disagree.
#if !defined(HEAD_DIM) || !defined(CONSUMERS) || !defined(BC) || !defined(STAGES) || !defined(SCHEDULE)
#error "compile through tklab.attention.build(...), which passes -DHEAD_DIM -DCONSUMERS -DBC -DSTAGES -DSCHEDULE"
#endif
#if !defined(EXP2_SPLIT) || !defined(MASK_SPLIT)
#error "compile through tklab.attention.build(..., EXP2_SPLIT=n, MASK_SPLIT=m), which also passes both of them"
#endif
static_assert(EXP2_SPLIT >= 0 && EXP2_SPLIT <= 8, "EXP2_SPLIT: how many of each 8 scores take the cubic, 0 to 8");
static_assert(!MASK_SPLIT || SCHEDULE != 0, "MASK_SPLIT splits the loop of SCHEDULE 1 and 2");
static_assert(SCHEDULE == 0 || CONSUMERS >= 2, "SCHEDULE 1 and 2 take turns between consumer warpgroups: "
              "they need CONSUMERS >= 2 (one consumer: SCHEDULE=0)");
constexpr int BR = 64 * CONSUMERS;
using split = warpgroup::register_split<24, CONSUMERS == 2 ? 240 : 160, CONSUMERS>;
// Named barriers (0 is __syncthreads): the ping-pong turns use ids 1 .. CONSUMERS, the epilogue one id per
// warpgroup from 8 (sync_group: 8 .. 11), so the two sets never share a barrier (checked here).
constexpr int turn_barriers = 1, epilogue_barriers = 8;
constexpr warpgroup::barrier_ids turn_ids{turn_barriers, CONSUMERS},
    epilogue_ids = warpgroup::sync_group_ids<epilogue_barriers>;
TK_BARRIERS_DISJOINT(turn_ids, epilogue_ids);
using turn = warpgroup::turns<turn_barriers, CONSUMERS>;
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
    /// Masked = false: the caller knows that every key of block j counts for each of these rows (MASK_SPLIT):
    /// no mask, and no guard (the block's scores are finite, so the new max is too).
    template <bool Masked = true>
    __device__ void exponentiate(int j, int row0, int seq, float c, bool causal) {
        if constexpr (!Masked) {
            online_softmax<false, /*Ways=*/4, /*SumsInLanes=*/true, /*Poly=*/EXP2_SPLIT>(s, m, l, a, c);
            return;
        }
        const int col0 = j * BC;
        if (causal && col0 + BC - 1 > row0) causal_mask(s, row0, col0);
        if (col0 + BC > seq) mask_keys_from(s, col0, seq);
        // Chapter 09's online-softmax update, as the library packages it (tk/ops/warp/online_softmax.cuh):
        // the new running max m, the factor a = 2^(c (m_old - m)) that rescales l now and O later,
        // P = 2^(c S - c m) in s, and l = a l + the row sums of P. Guarded: a row whose keys so far were
        // all masked (m = -inf) gets a = 1 and P = 0, where 2^(-inf + inf) would be NaN.
        // O's rescale waits for rescale_and_round: no product may still read O when it runs, and the
        // warp skips it where no row's max changed.
        // The row max as 4 independent chains (a row of BC = 176 is 44 values per lane: one chain of 44
        // dependent FMNMX would sit on the critical path of every block), and l kept as each lane's share
        // of the row sums, finished once by finish() instead of shuffled every block.
        online_softmax<true, /*Ways=*/4, /*SumsInLanes=*/true, /*Poly=*/EXP2_SPLIT>(s, m, l, a, c);
    }
    /// After the last block: l's lane shares added up (the 4 lanes that hold a row each kept their own).
    __device__ void finish() { finish_row_sum(l); }
    /// O = a O, and P rounded to bf16 for the next product (only once no product reads O or P). Once
    /// the row maxima settle, a = 1 in most blocks: then the warp skips the multiplies.
    __device__ void rescale_and_round() {
        if (warp_any(a, [](float x) { return x != 1.0f; })) mul_row(o, o, a);
        copy(p, s);
    }
    /// Has exponentiate() run? Always true: l holds sums of exponentials, never below 0, and a NaN fails
    /// `< 0` too. The compiler cannot prove that, so whatever a branch on it guards comes after every
    /// exponential l sums, in the SASS as in the source.
    __device__ bool exponentiated() const {
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < decltype(l)::n_regs; ++i) sum += l.reg(i);
        return !(sum < 0.0f);
    }
};

/// The step the overlapped schedules repeat: take the turn (ping-pong only), issue the products, hand the
/// turn on. Block 0 issues S_0 alone, the key loop S_j with P V_{j-1}, the last step P V alone; the last
/// step ends the block's turns (`pass_last`: nobody is left to take another).
enum class after { pass, last };
// (Turn is a template parameter so that a build without ping-pong, e.g. one consumer, never instantiates
// turns<.., 1>, whose static_assert asks for two groups.)
template <bool PingPong, typename Issue, typename Turn = turn>
__device__ inline void in_turn(int me, Issue issue, after then = after::pass) {
    if constexpr (PingPong) Turn::wait(me);
    issue();
    if constexpr (PingPong) {
        if (then == after::last) Turn::pass_last(me);
        else Turn::pass(me);
    }
}

extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * 128, 1)
flash_fwd(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
          const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_o, float* lse,
          int heads, int seq, float scale, int causal
          ) {
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
    const int me = __shfl_sync(0xffffffff, warpgroup::groupid() - 1, 0);  // the same in every lane: see above
    const int row0 = q_block * BR + me * 64 + 16 * warpgroup::warp();  // this warp's first query row
    const float c = scale * 1.4426950408889634f;                      // scale * log2(e)
    softmax_state rows;  // this warp's 16 query rows
    fill(rows.m, neg_inf);
    zero(rows.l);
    zero(rows.o);
    ring_cursor<STAGES> at_k, at_v;
    wait(sm.q_full, 0);

#if SCHEDULE == 0
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
#else
    constexpr bool pingpong = SCHEDULE == 2;
    if (pingpong) turn::start(me);
    if (pingpong) turn::equal_steps(me, kv_blocks);  // -DTK_DEBUG_TURNS: every consumer walks as many
    // Block 0: S_0 alone.
    wait(sm.k_pipe.full[at_k.stage], at_k.phase);
    in_turn<pingpong>(me, [&] {
        warpgroup::mm_ABt(rows.s, sm.q[me], sm.k[at_k.stage]);
    });
    warpgroup::mma_async_wait<0>(rows.s);
    sm.k_pipe.release(at_k.stage);
    at_k.advance();
    rows.exponentiate(0, row0, seq, c, causal);
    rows.rescale_and_round();
#if MASK_SPLIT
    // The blocks no row of this consumer needs masked (before its first row's diagonal block, before a partial
    // last block) through a body without the mask, then the others through the masked one.
    const int first_row = q_block * BR + me * 64;
    const int unmasked = min(causal ? (first_row + 1) / BC : kv_blocks, seq / BC);
    // masked is a constant at each of the two calls below: step is inlined into both loops, so each gets its own
    // body, the unmasked one without the mask code. (Not a generic lambda taking the choice as a type: NVRTC 13.0
    // takes its operator() template for a host function and refuses it in device code; 13.5 compiles both to the
    // same SASS.)
    auto step = [&](int j, bool masked) {
        wait(sm.k_pipe.full[at_k.stage], at_k.phase);
        wait(sm.v_pipe.full[at_v.stage], at_v.phase);
        in_turn<pingpong>(me, [&] {
            warpgroup::mm_ABt(rows.s, sm.q[me], sm.k[at_k.stage]);
            warpgroup::mma_AB(rows.o, rows.p, sm.v[at_v.stage]);
        });
        warpgroup::mma_async_wait<1>(rows.s);  // S_j is done; P V may still run
        if (masked) rows.exponentiate<true>(j, row0, seq, c, causal);
        else rows.exponentiate<false>(j, row0, seq, c, causal);
        // Nothing reads K_j since the wait above, but released there, ptxas puts the wait for P V before
        // the exponentials and the softmax no longer runs under the product (the SASS is the truth:
        // tklab.toolchain.overlap counts them). Behind a test on the softmax's result, both stay after it.
        if (rows.exponentiated()) sm.k_pipe.release(at_k.stage);
        warpgroup::mma_async_wait<0>(rows.o, rows.p);
        sm.v_pipe.release(at_v.stage);
        rows.rescale_and_round();
    };
    int j = 1;
    for (; j < unmasked; ++j, at_k.advance(), at_v.advance()) step(j, false);
    for (; j < kv_blocks; ++j, at_k.advance(), at_v.advance()) step(j, true);
#else
    // Blocks 1 ..: issue S_j and O += P_{j-1} V_{j-1} back to back, exponentiate S_j under the second.
    for (int j = 1; j < kv_blocks; ++j, at_k.advance(), at_v.advance()) {
        wait(sm.k_pipe.full[at_k.stage], at_k.phase);
        wait(sm.v_pipe.full[at_v.stage], at_v.phase);
        in_turn<pingpong>(me, [&] {
            warpgroup::mm_ABt(rows.s, sm.q[me], sm.k[at_k.stage]);
            warpgroup::mma_AB(rows.o, rows.p, sm.v[at_v.stage]);
        });
        warpgroup::mma_async_wait<1>(rows.s);  // S_j is done; P V may still run
        rows.exponentiate(j, row0, seq, c, causal);
        // Nothing reads K_j since the wait above, but released there, ptxas puts the wait for P V before
        // the exponentials and the softmax no longer runs under the product (the SASS is the truth:
        // tklab.toolchain.overlap counts them). Behind a test on the softmax's result, both stay after it.
        if (rows.exponentiated()) sm.k_pipe.release(at_k.stage);
        warpgroup::mma_async_wait<0>(rows.o, rows.p);
        sm.v_pipe.release(at_v.stage);
        rows.rescale_and_round();
    }
#endif
    // The last block's P V.
    wait(sm.v_pipe.full[at_v.stage], at_v.phase);
    in_turn<pingpong>(me, [&] {
        warpgroup::mma_AB(rows.o, rows.p, sm.v[at_v.stage]);
    }, after::last);
    warpgroup::mma_async_wait<0>(rows.o);
    sm.v_pipe.release(at_v.stage);
#endif

    // Epilogue: O / l through this consumer's Q tile (stmatrix), out with one TMA store that skips rows
    // past the end of the head; L = ln(sum) + scaled max, one lane per row (-inf for a row no key reached).
    rows.finish();
    map(rows.a, rows.l, [](float l) { return l == 0.0f ? 0.0f : fast::rcp(l); });  // a row no key reached: O = 0
    mul_row(rows.o, rows.o, rows.a);
    warpgroup::store(sm.q[me], rows.o);
    fence_proxy_async();  // our ordinary shared stores, then the copy engine reads them
    warpgroup::sync_group<epilogue_barriers>(me);  // this consumer's 128 threads only
    if (warpgroup::threadid() == 0) {
        tma::store_async(map_o, sm.q[me], {b, h, q_block * CONSUMERS + me, 0});
        tma::store_commit();
    }
    col_vec<rt_fl<16, BC>> row_lse;  // ln(sum of e^(scaled score)) = (log2(l) + c m) ln 2
    map(row_lse, rows.l, rows.m, [c](float l, float mx) { return (fast::log2(l) + c * mx) * 0.69314718055994531f; });
    store(lse + (size_t(b) * heads + h) * seq + row0, row_lse, seq - row0);
    if (warpgroup::threadid() == 0) tma::store_wait_read<0>();
}
