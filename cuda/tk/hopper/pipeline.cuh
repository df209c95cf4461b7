// A ring of shared-memory stages between one producer (TMA) and consumer warpgroups (wgmma).
//
// Stage s has two mbarriers. full[s]: the producer announces the stage's bytes and TMA completes the
// phase when they land. empty[s]: every consumer warp arrives once it is done reading the stage, which
// hands it back to the producer. Both sides walk the ring with a cursor {stage, phase}; the phase
// parity flips each time the cursor wraps, so a barrier is never confused with its previous round.
//
//   producer:  wait(p.empty[c.stage], c.phase ^ 1);  // slot free? (passes at once on the first lap)
//              arrive_expect_bytes(p.full[c.stage], bytes);  tma::load_async(..., p.full[c.stage], ...);
//   consumer:  wait(p.full[c.stage], c.phase);  ...mma, mma_async_wait...;  p.release(c.stage);
//   both:      c.advance();
//
// A ring with no hand-back barrier (init_full_barriers below): when the same warpgroup copies and computes,
// a __syncthreads() after its products already tells the copying lane that a stage is free, so only full[s]
// is needed.
#pragma once

#include "mbarrier.cuh"

namespace tk {

template <int Stages>
struct pipeline {
    mbarrier full[Stages];
    mbarrier empty[Stages];

    /// One thread, before the block's first __syncthreads(): `consumer_warps` arrivals free a stage.
    __device__ void init(int consumer_warps) {
#pragma unroll
        for (int s = 0; s < Stages; ++s) {
            init_mbarrier(full[s], 1);  // the producer's arrive_expect_bytes; TMA brings the bytes
            init_mbarrier(empty[s], consumer_warps);
        }
        fence_mbarrier_init();
    }

    /// A consumer warp is done with `stage` (call from all its lanes after its reads completed).
    __device__ void release(int stage) {
        if (laneid() == 0) arrive(empty[stage]);
    }
};

/// Only a ring's full barriers, for a block that hands stages back with __syncthreads() instead of empty
/// barriers. Each phase of full[s] completes on `arrivals` arrivals (1: the producer's arrive_expect_bytes)
/// plus the bytes it announced. One thread, before the block's first __syncthreads(); the fence makes the
/// initialised barriers visible to TMA, whose completions would otherwise race with the init.
template <int Stages>
__device__ void init_full_barriers(mbarrier (&full)[Stages], uint32_t arrivals) {
#pragma unroll
    for (int s = 0; s < Stages; ++s) init_mbarrier(full[s], arrivals);
    fence_mbarrier_init();
}

/// Position in the ring: which stage, and the parity of the lap we are on.
template <int Stages>
struct ring_cursor {
    int stage = 0;
    uint32_t phase = 0;
    __device__ void advance() {
        if (++stage == Stages) {
            stage = 0;
            phase ^= 1;
        }
    }
};

}  // namespace tk
