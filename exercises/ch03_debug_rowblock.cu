// GENERATED from solutions/ch03_debug_rowblock/ch03_debug_rowblock.cu by `python -m tklab exercises`.
// DEBUGGING EXERCISE: this program has one bug. Check it as it is (tklab.check("ch03_debug_rowblock")
// or python -m tklab check ch03_debug_rowblock), read what the verdict says it did, then find the bug
// and repair it.
// What it should do: C = A @ B at every shape the comment promises, square or not
// Stuck? tklab.hint("ch03_debug_rowblock") in a notebook, or python -m tklab hint ch03_debug_rowblock.
// Chapter 3, debugging: 1D register blocking along a row. C = A @ B, fp32, row-major.
//
// Section 2's kernel gives each thread 8 elements of one column of C; this one gives each thread
// TN = 8 neighbouring elements of one row. A block of 512 threads owns a 64×64 tile of C and walks
// along K in steps of BK = 8, copying a 64×8 tile of A and an 8×64 tile of B into shared memory (one
// element of each per thread). Per step k a thread reads one value of A and reuses it for 8
// multiply-adds, one per column of its group.
//
// Shapes: M and N multiples of 64, K a multiple of 8 (M, N and K need not be equal).
// Launch: grid (N/64, M/64), block 512.

constexpr int BM = 64, BN = 64, BK = 8, TN = 8;
constexpr int THREADS = BM * BN / TN;  // 512

extern "C" __global__ void __launch_bounds__(THREADS)
blocktile_rows(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
               int M, int N, int K) {
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int tr = tid / (BN / TN), tc = tid % (BN / TN);  // this thread's row of C, and its group of TN columns
    const int a_r = tid / BK, a_c = tid % BK;  // the element of A's tile this thread copies
    const int b_r = tid / BN, b_c = tid % BN;  // ... and of B's
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

    float acc[TN] = {};  // TN accumulators, in registers: every loop over them is unrolled
    for (int k0 = 0; k0 < K; k0 += BK) {
        As[a_r][a_c] = A[(row0 + a_r) * K + k0 + a_c];
        Bs[b_r][b_c] = B[(k0 + b_r) * N + col0 + b_c];
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float a = As[tr][kk];  // one shared load ...
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[j] += a * Bs[kk][tc * TN + j];  // ... reused TN times
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < TN; ++j) {
        C[(row0 + tr) * M + col0 + tc * TN + j] = acc[j];
    }
}
