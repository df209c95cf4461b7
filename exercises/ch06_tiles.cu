// GENERATED from solutions/ch06_tiles/ch06_tiles.cu by `python -m tklab exercises`: fill in the TODOs.
// Chapter 6: the same tensor-core GEMM as chapter 5's single tile, grown to a whole matrix with the
// tk tile library. C (M×N, fp32) = A (M×K, bf16, row-major) @ B (K×N, bf16, row-major).
//
// The library hides the fragment bookkeeping of chapter 5 behind four kinds of objects:
//   gl<T>           a matrix in global memory, addressed in whole tiles: {tile row, tile column}
//   st_bf<R, C>     a tile in shared memory (swizzled, so the reads below are conflict-free)
//   rt_bf / rt_fl   a tile in registers, spread over the 32 lanes of a warp in the mma fragment layout
//   ops             load_async (global → shared, cp.async), load (shared → registers, ldmatrix),
//                   mma_AB(d, a, b, c): d = a @ b + c on the tensor cores, store (registers → global)
//
// A block of 4 warps owns a 128×128 tile of C; each warp owns a 64×64 piece of it, held in registers
// as an fp32 tile for the whole K loop. Per step of BK = 32 along K, the block copies a 128×32 slice
// of A and a 32×128 slice of B into shared memory, and each warp multiplies its rows of the A slice by
// its columns of the B slice, 16 columns of K at a time.
//
// Launch: grid = (N/128, M/128), block = 128. Shapes: M, N multiples of 128, K a multiple of 32.
#include "tk.cuh"
using namespace tk;

constexpr int BM = 128, BN = 128, BK = 32;                     // block tile of C, step along K
constexpr int WARPS_M = 2, WARPS_N = 2, WARPS = WARPS_M * WARPS_N;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;           // each warp's 64×64 piece of C

extern "C" __global__ void __launch_bounds__(WARPS * 32)
tiles_gemm(const bf16* A_ptr, const bf16* B_ptr, float* C_ptr, int M, int N, int K) {
    const gl<const bf16> A(A_ptr, M, K), B(B_ptr, K, N);
    const gl<float> C(C_ptr, M, N);
    __shared__ st_bf<BM, BK> a_s;  // this step's slice of A
    __shared__ st_bf<BK, BN> b_s;  // this step's slice of B

    const int warp_m = warpid() / WARPS_N, warp_n = warpid() % WARPS_N;  // the warp's piece of the tile
    const int block_m = blockIdx.y, block_n = blockIdx.x;

    rt_fl<WM, WN> acc;     // the warp's 64×64 piece of C, fp32
    rt_bf<WM, 16> a;       // A operand of one 16-deep step: 64 rows × 16
    rt_bf<16, WN, col> b;  // B operand: 16 × 64, column layout (what mma wants for B)
    zero(acc);

    for (int k = 0; k < K / BK; k++) {
        // TODO: your code here (about 5 lines).
        // Goal: all warps together bring this step's slices of A and B into shared memory asynchronously,
        //       and every chunk has landed before anyone reads
        // Stuck? tklab.hint("ch06_tiles") in a notebook, or python -m tklab hint ch06_tiles.

        // TODO: your code here (about 7 lines).
        // Goal: this warp's product of its slices, 16 deep at a time, accumulated in acc; nobody overwrites
        //       the slices while others read them
    }

    // TODO: your code here (about 1 line).
    // Goal: this warp's piece of C, written out: which tile is it, counted in warp tiles?
}
