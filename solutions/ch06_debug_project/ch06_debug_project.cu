// Chapter 6, debugging: many rows times one weight tile, with the tk tile library.
// Y (M×64, fp32) = X (M×64, bf16, row-major) · W (64×64, bf16, row-major).
//
// A block of 4 warps handles 4 × 32 rows of X. W is the same for every row, so each block brings it
// into shared memory once: all four warps copy it together with cp.async (load_async<WARPS>), then
// every warp loads it into registers as the B operand of its product. Each warp then multiplies its
// own 32 rows of X, read straight from global memory into a register tile, by W, and stores its 32
// rows of Y. A warp whose rows lie past the end of X has nothing to do.
//
// Launch: grid = ceil(M / 128), block = 128. Shapes: M a multiple of 32.
#include "tk.cuh"
using namespace tk;

constexpr int D = 64;       // columns of X and Y, rows and columns of W
constexpr int ROWS = 32;    // rows of X (and Y) per warp
constexpr int WARPS = 4;

extern "C" __global__ void __launch_bounds__(WARPS * 32)
tiles_project(const bf16* X_ptr, const bf16* W_ptr, float* Y_ptr, int M) {
    const gl<const bf16> X(X_ptr, M, D), W(W_ptr, D, D);
    const gl<float> Y(Y_ptr, M, D);
    __shared__ st_bf<D, D> w_s;  // W, shared by the block's warps

    load_async<WARPS>(w_s, W, {0, 0});  // every warp copies its share of W
    cp_async_commit();
    // BEGIN BUG hint: Y = X W for M a multiple of 32, W staged in shared memory once per block by all its warps together
    cp_async_wait<0>();
    __syncthreads();  // all of W is in shared memory before any warp reads it
    // BUG: __syncthreads();  // all of W is in shared memory before any warp reads it
    // END BUG

    rt_bf<D, D, col> w;  // W as the B operand (column layout)
    load(w, w_s);

    const int tile = blockIdx.x * WARPS + warpid();  // this warp's 32 rows of X, counted in tiles
    if (tile * ROWS >= M) return;
    rt_bf<ROWS, D> x;
    rt_fl<ROWS, D> y;
    load(x, X, {tile, 0});
    zero(y);
    mma_AB(y, x, w, y);
    store(Y, y, {tile, 0});
}
