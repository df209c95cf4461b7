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
/// (TMA bytes, or stores made before other threads arrived) is visible to this thread.
__device__ inline void wait(mbarrier& bar, uint32_t parity) {
    while (!test_wait(bar, parity)) {
    }
}

}  // namespace tk
