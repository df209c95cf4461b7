// Turns in global memory: blocks that add into the same place take turns, so the sum is the same every run.
//
// Why: a sum whose parts come from many blocks (attention's dQ: every key block adds its share of a query
// step with a TMA reduce-add) is exact per addition, but fp32 addition is not associative, so the last bits
// depend on the ORDER the parts land, which the hardware does not fix. A counter per sum fixes it: the block
// whose rank among the adders is r waits until the counter reads r, adds, and only then counts it up.
//
//   turn::wait_for(counter, rank);             // acquire: the earlier ranks' adds are complete
//   tma::store_add_async(...); tma::store_commit();
//   turn::pass_after_bulk_stores(counter);     // this thread's adds complete in global memory, then release
//
// Two things make the order real, and both are easy to get wrong:
//   * pass_after_bulk_stores waits for the bulk stores to COMPLETE (cp.async.bulk.wait_group 0), not only to
//     have READ shared memory (wait_group.read, which is all that reusing the source tile needs): a reduce-add
//     still on its way to global memory when the next rank's add lands is exactly the race the turns exist
//     to prevent.
//   * the adds are made by the async proxy (the copy engine), the counter by ordinary (generic-proxy) atomics.
//     The PTX memory model orders the two proxies only across a proxy fence: fence.proxy.async.global after the
//     wait and before the release here, and after the acquire and before the next adds in wait_for.
//   On sm_90a ptxas compiles both waits to the same DEPBAR on the bulk-copy scoreboard; the full wait adds
//   CCTL.IVALL (this SM's L1 dropped, so what the adds wrote is what it reads next). Whether the hardware's
//   scoreboard already covers the writes is not documented: the PTX-level full wait is what is promised.
// Forward progress: a block only ever waits for blocks of LOWER rank, which must already be running or done.
// CUDA does not promise an order in which blocks start; in practice they start in increasing linear blockIdx
// (FlashAttention-3's deterministic backward relies on the same), so a rank that grows with blockIdx within one
// sum never waits for a block that has not started; a rank that falls with blockIdx can deadlock once the grid
// is larger than what fits on the GPU at once.
// The counters start at 0 (a memset or a kernel that runs before); one int32 per sum.
#pragma once

#include "tma_raw.cuh"

namespace tk::turn {

/// Spin (one thread) until the counter in global memory reads `rank`: an acquire load, so that what the
/// earlier ranks wrote before their release is visible here, with a growing __nanosleep between polls
/// so the spinning leaves the memory system to the others.
/// Debug build, -DTK_DEBUG_WAITS=n: after n polls print the counter's address, its value and the rank, then
/// trap (a rank that can never come, instead of a silent hang).
__device__ inline void wait_for(const int* counter, int rank) {
    unsigned sleep = 8;
#if defined(TK_DEBUG_WAITS) && TK_DEBUG_WAITS > 0
    long long polls = 0;
#endif
    for (;;) {
        int now;
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(now) : "l"(counter) : "memory");
        if (now == rank) break;
#if defined(TK_DEBUG_WAITS) && TK_DEBUG_WAITS > 0
        if (++polls >= (long long)(TK_DEBUG_WAITS)) {
            printf("tk::turn::wait_for gave up after %lld polls: counter %p reads %d, waiting for %d, block "
                   "(%d, %d, %d) thread %d\n", polls, (const void*)counter, now, rank, int(blockIdx.x),
                   int(blockIdx.y), int(blockIdx.z), int(threadIdx.x));
            __trap();
        }
#endif
        __nanosleep(sleep);
        sleep = sleep < 256 ? 2 * sleep : sleep;
    }
    asm volatile("fence.proxy.async.global;\n" ::: "memory");  // the acquire before this thread's async adds
}

/// Hand the turn to the next rank: wait until every bulk store group this thread committed has COMPLETED in
/// global memory (not only read its source), fence the async proxy's writes against the generic proxy, then
/// add 1 to the counter with release semantics at GPU scope.
__device__ inline void pass_after_bulk_stores(int* counter) {
    tma::store_wait<0>();
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter) : "memory");
}

}  // namespace tk::turn
