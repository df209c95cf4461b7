// mbarrier probes: phase parity bookkeeping, and a two-stage producer/consumer ring run for many laps.
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

/// Warp 0 produces 0, 1, ..., laps-1 through a 2-slot ring; warps 1..3 consume every value.
/// out[w] = sum seen by consumer warp w, out[3 + w] = number of values seen out of order.
extern "C" __global__ void ring(int* out, int laps) {
    constexpr int STAGES = 2, CONSUMER_WARPS = 3;
    __shared__ pipeline<STAGES> bars;
    __shared__ int slot[STAGES];
    if (threadIdx.x == 0) bars.init(CONSUMER_WARPS);
    __syncthreads();
    ring_cursor<STAGES> lap;
    if (warpid() == 0) {
        if (laneid() == 0) {
            for (int i = 0; i < laps; ++i, lap.advance()) {
                wait(bars.empty[lap.stage], lap.phase ^ 1);
                slot[lap.stage] = i;
                arrive(bars.full[lap.stage]);
            }
        }
    } else {
        int sum = 0, disorder = 0;
        for (int i = 0; i < laps; ++i, lap.advance()) {
            wait(bars.full[lap.stage], lap.phase);
            const int v = slot[lap.stage];
            sum += v;
            disorder += v != i;
            __syncwarp();
            bars.release(lap.stage);
        }
        if (laneid() == 0) {
            out[warpid() - 1] = sum;
            out[CONSUMER_WARPS + warpid() - 1] = disorder;
        }
    }
}
