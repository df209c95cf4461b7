// mbarrier: a barrier object in shared memory that counts arrivals AND bytes.
//
// Hopper's asynchronous copies report completion to an mbarrier. A barrier is initialised with an
// arrival count; its current *phase* completes when that many threads have arrived and every byte
// announced with expect_bytes() has landed (TMA counts bytes down as they arrive). Then the barrier
// flips to the next phase and starts counting again, so one barrier serves a whole loop.
//
// Waiters name a phase by its parity (0, 1, 0, 1, ...): wait(bar, p) returns once the phase with parity
// p has completed. A fresh barrier is in phase 0, and asking it for parity 1 returns at once (the phase
// "before" the first counts as complete): that is how a producer's first wait on an empty slot passes.
#pragma once

#include "../common/common.cuh"

namespace tk {

/// One mbarrier: 8 bytes of shared memory, 8-byte aligned. Only touch it through the functions below.
struct alignas(8) mbarrier {
    uint64_t state;
};

/// Set the number of arrivals that completes each phase. One thread does this, then the block syncs.
__device__ inline void init_mbarrier(mbarrier& bar, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(&bar)), "r"(arrivals) : "memory");
}

/// Publish initialised barriers to the async proxy (TMA); call after the init()s, before __syncthreads().
__device__ inline void fence_mbarrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/// Count one arrival of this thread.
__device__ inline void arrive(mbarrier& bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(&bar)) : "memory");
}

/// Count one arrival for the calling warp: call from all its lanes once their stores are made. __syncwarp
/// orders every lane's earlier accesses before lane 0's arrival, so a barrier whose writers are warps
/// counts one arrival per warp (4 for a warpgroup) instead of one per thread.
__device__ inline void arrive_warp(mbarrier& bar) {
    __syncwarp();
    if (laneid() == 0) arrive(bar);
}

/// Announce `bytes` more bytes for the current phase AND count one arrival (the usual producer call,
/// made right before issuing the TMA loads that deliver those bytes).
__device__ inline void arrive_expect_bytes(mbarrier& bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(&bar)), "r"(bytes)
                 : "memory");
}

/// Announce `bytes` more bytes for the current phase, without arriving.
__device__ inline void expect_bytes(mbarrier& bar, uint32_t bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(&bar)), "r"(bytes)
                 : "memory");
}

/// Has the phase with this parity completed? Does not block (beyond a short hardware-chosen wait).
__device__ inline bool test_wait(mbarrier& bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{\n .reg .pred p;\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(&bar)), "r"(parity)
        : "memory");
    return done != 0;
}

/// Block until the phase with this parity has completed. Afterwards the data that phase announced
/// (TMA bytes, or stores made before other threads arrived) is visible to this thread. `name` is for the
/// debug build only (below): the default build ignores it, and its code does not change.
///
/// Debug build, -DTK_DEBUG_WAITS=n (n > 0): a wait that polls n times without the phase completing prints
/// the barrier (its name if the caller gave one, else "(unnamed)"; always its shared-memory offset, so that
/// the kernel's layout tells which it is, and the parity waited for), the call site (file and line of the
/// wait() call, from __builtin_FILE/__builtin_LINE as default arguments: no caller has to change), the
/// block and the thread, then traps: a protocol slip (an arrival missing, a phase off by one) stops with
/// a message instead of hanging silently. Each poll is one mbarrier.try_wait, which itself may suspend
/// the thread for a hardware-chosen time, so n = 1,000,000 is seconds on a GPU.
#if defined(TK_DEBUG_WAITS) && TK_DEBUG_WAITS > 0
__device__ inline void wait(mbarrier& bar, uint32_t parity, const char* name = nullptr,
                            const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    for (long long polls = 1; !test_wait(bar, parity); ++polls) {
        if (polls >= (long long)(TK_DEBUG_WAITS)) {
            printf("tk::wait gave up after %lld polls: mbarrier %s at shared offset %u, phase parity %u, "
                   "waited for at %s:%d, block (%d, %d, %d) thread %d\n",
                   polls, name ? name : "(unnamed)", smem_u32(&bar), parity, file, line, int(blockIdx.x),
                   int(blockIdx.y), int(blockIdx.z), int(threadIdx.x));
            __trap();
        }
    }
}
#else
__device__ inline void wait(mbarrier& bar, uint32_t parity, const char* name = nullptr) {
    (void)name;
    while (!test_wait(bar, parity)) {
    }
}
#endif

}  // namespace tk
