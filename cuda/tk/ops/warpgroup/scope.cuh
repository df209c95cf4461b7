// Warpgroup scope: 4 consecutive warps (128 threads) that act as one, as wgmma requires.
//
// A warpgroup starts at a warp index divisible by 4, so in a block of 384 threads warpgroup 0 is
// threads 0-127, and so on. Warp-specialised kernels give each warpgroup one role (producer: issue TMA
// copies; consumer: run wgmma) and rebalance the register file between them with setmaxnreg.
//
// Two "which warp" questions have two names: tk::warpid() is the warp in the BLOCK (0..11 in a block of
// 384), warpgroup::warp() the warp in its WARPGROUP (0..3) -- the one that owns rows 16w..16w+15 of a
// wgmma accumulator.
#pragma once

#include "../../common/common.cuh"

namespace tk::warpgroup {

inline constexpr int WARPS = 4;
inline constexpr int THREADS = 128;

/// Which warpgroup of the block this thread belongs to.
__device__ inline int groupid() { return threadIdx.x / THREADS; }
/// This thread's warp inside its warpgroup (0..3): the warp owning rows 16w..16w+15 of a wgmma tile.
__device__ inline int warp() { return (threadIdx.x / WARP_THREADS) % WARPS; }
/// This thread's index inside its warpgroup (0..127).
__device__ inline int threadid() { return threadIdx.x % THREADS; }

/// True in exactly one lane of the calling warp (elect.sync): the lane that issues a warp's TMA copies.
/// Better than `threadIdx.x == 0`: a TMA instruction takes its operands from uniform registers, and under
/// that divergent branch ptxas cannot prove them uniform, so it wraps the instruction in a loop that serves
/// one distinct operand value per trip (chapter 08, step 2).
__device__ inline bool elect_one() {
    uint32_t elected;
    asm volatile("{\n .reg .b32 lane;\n .reg .pred p;\n elect.sync lane|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(elected));
    return elected != 0;
}

// ---- register rebalancing ---------------------------------------------------------------------------
/// setmaxnreg: every thread of the warpgroup now owns N registers (24..256, a multiple of 8). Producers
/// that only issue copies give registers back (decrease), consumers holding big accumulators take them
/// (increase). Works only when the kernel has a register cap at entry: __launch_bounds__(threads, 1).
template <int N>
__device__ inline void increase_registers() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg takes 24..256 in steps of 8");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ inline void decrease_registers() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg takes 24..256 in steps of 8");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

/// Registers per thread a block of `Threads` threads starts with under __launch_bounds__(Threads, 1): the
/// 65,536-register file shared out, in the allocation unit of 8 per thread, at most 256 (ptxas's 255,
/// rounded up to the unit). 168 at 384 threads, 128 at 512, 256 at 256.
template <int Threads>
inline constexpr int launch_registers = (65536 / Threads) / 8 * 8 < 256 ? (65536 / Threads) / 8 * 8 : 256;

/// A producer/consumer register split, checked where it is written. setmaxnreg does not draw on the SM's
/// whole register file: it moves registers within the pool the block was given at launch, launch
/// registers x threads (168 x 384 = 64,512 for one producer and two consumer warpgroups, not 65,536).
/// Producers warpgroups keeping P registers each and Consumers warpgroups taking C must fit that pool,
/// or a consumer's increase waits forever for registers nobody can give back: the kernel hangs.
template <int P, int C, int Consumers, int Producers = 1>
struct register_split {
    static constexpr int threads = (Producers + Consumers) * THREADS;
    static constexpr int pool = launch_registers<threads> * threads;  // what the block owns at launch
    static constexpr int wanted = (Producers * P + Consumers * C) * THREADS;
    static_assert(wanted <= pool,
                  "register_split: the warpgroups ask for more registers than the block owns. setmaxnreg only "
                  "moves registers inside the block's launch pool (launch registers x threads: 168 x 384 = "
                  "64,512 for 1 producer + 2 consumers), so (Producers*P + Consumers*C) * 128 must fit it; "
                  "otherwise a consumer's increase waits forever. Give the producer fewer (24) or the "
                  "consumers fewer (e.g. 240 -> 232)");
    __device__ static void producer() { decrease_registers<P>(); }
    __device__ static void consumer() { increase_registers<C>(); }
};

// ---- named barriers ----------------------------------------------------------------------------------
/// One of the block's 16 hardware barriers (0 is __syncthreads), for Count threads. sync() arrives and
/// waits until Count threads have arrived; arrive() only counts this thread's warp and goes on. The id
/// is a compile-time constant, so the assembler knows exactly which barriers a kernel uses.
template <int Id, int Count>
struct named_barrier {
    static_assert(Id >= 1 && Id < 16, "named barrier ids are 1..15 (0 is __syncthreads)");
    static_assert(Count % WARP_THREADS == 0, "a named barrier counts whole warps");
    __device__ static void sync() { asm volatile("bar.sync %0, %1;\n" ::"n"(Id), "n"(Count) : "memory"); }
    __device__ static void arrive() { asm volatile("bar.arrive %0, %1;\n" ::"n"(Id), "n"(Count) : "memory"); }
};

/// A purpose's range of named-barrier ids, first .. first + count - 1. A kernel names one per purpose
/// (turns, a warpgroup's own sync, ...) and checks them with TK_BARRIERS_DISJOINT, so that an option that
/// shifts or widens one range stops the build instead of letting two purposes meet on a barrier (a
/// barrier used with two thread counts, or two groups' arrivals counted together, hangs or passes early).
struct barrier_ids {
    int first, count;
    __host__ __device__ constexpr int last() const { return first + count - 1; }
    __host__ __device__ constexpr bool valid() const { return count >= 1 && first >= 1 && last() <= 15; }
};
__host__ __device__ constexpr bool disjoint(barrier_ids a, barrier_ids b) { return a.last() < b.first || b.last() < a.first; }

/// Barrier for the 128 threads of one warpgroup only: warpgroup g (0 .. Groups - 1) uses named barrier
/// FirstId + g. Its ids: sync_group_ids<FirstId, Groups>.
template <int FirstId = 1, int Groups = 4>
__device__ inline void sync_group(int g) {
    static_assert(Groups >= 1 && Groups <= 4 && FirstId >= 1 && FirstId + Groups - 1 < 16,
                  "sync_group: 1-4 warpgroups, barrier ids FirstId .. FirstId + Groups - 1 in 1..15");
    switch (g) {  // a constant id per branch: the assembler reserves only these barriers
        case 0: named_barrier<FirstId + 0, THREADS>::sync(); break;
        case 1: if constexpr (Groups > 1) { named_barrier<FirstId + 1, THREADS>::sync(); break; } [[fallthrough]];
        case 2: if constexpr (Groups > 2) { named_barrier<FirstId + 2, THREADS>::sync(); break; } [[fallthrough]];
        default: named_barrier<FirstId + Groups - 1, THREADS>::sync(); break;  // (g past the groups: the last)
    }
}
template <int FirstId, int Groups = 4>
inline constexpr barrier_ids sync_group_ids{FirstId, Groups};

/// G warpgroups taking turns on the tensor cores ("ping-pong" for G = 2): while one issues its matrix
/// products, the others run their softmax. Group g waits on named barrier Id + g; the group before it
/// (g - 1, cyclically) hands it the turn by arriving there, so each barrier counts 256 threads: 128
/// that sync, 128 that arrive. One token goes round: a group cannot pass twice before the next group
/// took its turn, because passing again needs its own turn back first.
///   start(me)            once: the last group hands the first turn to group 0
///   wait(me) ... pass(me) around the products
///   pass_last(me)        instead of the block's very last pass: the last group skips it, so that no
///                        arrival is left pending when the block exits
template <int Id, int G>
struct turns {
    static_assert(G >= 2 && Id >= 1 && Id + G <= 16, "turns: G >= 2 groups, barrier ids Id .. Id+G-1 in 1..15");
    template <int I = 0>
    __device__ static void sync_at(int g) {  // constant ids, one branch each
        if constexpr (I < G) {
            if (g == I) named_barrier<Id + I, 2 * THREADS>::sync();
            else sync_at<I + 1>(g);
        }
    }
    template <int I = 0>
    __device__ static void arrive_at(int g) {
        if constexpr (I < G) {
            if (g == I) named_barrier<Id + I, 2 * THREADS>::arrive();
            else arrive_at<I + 1>(g);
        }
    }
    __device__ static void start(int me) {
        if (me == G - 1) arrive_at(0);
    }
    __device__ static void wait(int me) { sync_at(me); }
    __device__ static void pass(int me, bool final = false) {
        if (!(final && me == G - 1)) arrive_at((me + 1) % G);
    }
    __device__ static void pass_last(int me) { pass(me, true); }
    static constexpr barrier_ids ids{Id, G};

    /// Every group must take as many turns as the others: a group with one more waits for a hand-over
    /// nobody makes, and the block hangs on a named barrier (no timeout there). equal_steps(me, steps),
    /// called by every group right after start() with the steps it is about to walk, checks it in debug
    /// builds (-DTK_DEBUG_TURNS): the token goes round once, group 0 leaves its count in shared memory,
    /// each later group compares its own and, if they differ, prints both and traps; the token is then
    /// back with group 0, as after start(). Without the flag it is empty (the SASS does not change).
#if defined(TK_DEBUG_TURNS)
    __device__ static void equal_steps(int me, int steps) {
        __shared__ int group0_steps, reported;
        wait(me);
        if (me == 0) {
            if (threadid() == 0) group0_steps = steps, reported = 0;
        } else if (steps != group0_steps) {
            if (atomicExch(&reported, 1) == 0)  // the first thread to see it (the others may trap first)
                printf("tk::warpgroup::turns<%d, %d>: consumer group %d walks %d steps, group 0 walks %d: unequal "
                       "counts hang the turn barriers; block (%d, %d, %d)\n",
                       Id, G, me, steps, group0_steps, int(blockIdx.x), int(blockIdx.y), int(blockIdx.z));
            __trap();
        }
        pass(me);
    }
#else
    __device__ static void equal_steps(int, int) {}
#endif
};

/// The same check for Groups warpgroups that meet every step on named barrier Id (Groups x 128 threads,
/// e.g. two consumers sharing tiles): one that walks fewer steps leaves the others waiting there for
/// good. Debug builds (-DTK_DEBUG_TURNS): every group's thread 0 leaves its count in shared memory, all
/// meet on Id, and a group whose count differs from group 0's prints both and traps. Empty otherwise.
template <int Id, int Groups>
__device__ inline void equal_steps(int me, int steps) {
#if defined(TK_DEBUG_TURNS)
    __shared__ int counts[Groups], reported;
    if (threadid() == 0) counts[me] = steps;
    if (me == 0 && threadid() == 0) reported = 0;
    named_barrier<Id, Groups * THREADS>::sync();
    const int group0 = counts[0];
    named_barrier<Id, Groups * THREADS>::sync();  // everyone has read: the counts may be written again
    if (steps != group0) {
        if (atomicExch(&reported, 1) == 0)  // the first thread to see it (the others may trap first)
            printf("tk::warpgroup::equal_steps<%d, %d>: group %d walks %d steps, group 0 walks %d: unequal counts "
                   "hang named barrier %d; block (%d, %d, %d)\n",
                   Id, Groups, me, steps, group0, Id, int(blockIdx.x), int(blockIdx.y), int(blockIdx.z));
        __trap();
    }
#else
    (void)me;
    (void)steps;
#endif
}

}  // namespace tk::warpgroup

/// static_assert that two named-barrier ranges (tk::warpgroup::barrier_ids) lie in 1..15 and share no id;
/// the message names both, as written at the call.
#define TK_BARRIERS_DISJOINT(A, B)                                                                        \
    static_assert((A).valid() && (B).valid(), "named barrier ids are 1..15: " #A " or " #B " is outside"); \
    static_assert(::tk::warpgroup::disjoint((A), (B)), "named barriers overlap: " #A " and " #B         \
                                                       " share an id (ranges first .. first + count - 1)")
