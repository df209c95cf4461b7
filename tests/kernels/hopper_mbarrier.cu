// mbarrier probe: phase parity bookkeeping (notebook 07 runs it; the ring run for many laps: hopper_ring.cu).
#include "tk.cuh"

using namespace tk;

/// One thread walks a barrier of 2 arrivals through two phases, recording test_wait() answers.
extern "C" __global__ void phases(int* out) {
    __shared__ mbarrier bar;
    if (threadIdx.x != 0) return;
    init_mbarrier(bar, 2);
    fence_mbarrier_init();
    out[0] = test_wait(bar, 1);  // the phase before the first counts as complete
    out[1] = test_wait(bar, 0);  // phase 0: no arrivals yet
    arrive(bar);
    out[2] = test_wait(bar, 0);  // 1 of 2 arrivals
    arrive(bar);
    out[3] = test_wait(bar, 0);  // phase 0 complete
    out[4] = test_wait(bar, 1);  // phase 1 just started
    arrive(bar);
    arrive(bar);
    out[5] = test_wait(bar, 1);  // phase 1 complete
    out[6] = test_wait(bar, 0);  // phase 2 (parity 0) just started
}
