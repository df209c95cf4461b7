// The library's pipeline<> ring: a two-stage producer/consumer ring run for many laps (apart from
// hopper_mbarrier.cu, which notebook 07 points at before chapter 07 asks for the ring's protocol).
#include "tk.cuh"

using namespace tk;

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
