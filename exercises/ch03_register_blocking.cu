// GENERATED from solutions/ch03_register_blocking/ch03_register_blocking.cu by `python -m tklab exercises`: fill in the TODOs.
// Chapter 3: register blocking. C = A @ B, fp32, row-major; A is M×K, B is K×N, C is M×N.
//
// Chapter 2's kernel does one multiply-add per two shared-memory loads, so shared memory, not the
// FMA units, sets its speed. Here each thread computes an 8×8 patch of C held in 64 registers: per
// step along K it loads 8 values of A and 8 of B from shared memory and does 8·8 = 64 FMAs with
// them, 4 FMAs per load instead of 0.5. A block of 256 threads owns a 128×128 tile of C and walks
// along K in steps of BK = 8. Loads are 16 bytes wide (float4): a quarter of the instructions.
//
// Layouts worth seeing:
// * A's tile is stored transposed in shared memory (As[k][m]), so the 8 values of A a thread needs
//   at step k are contiguous and come in two float4 loads, like B's.
// * A thread's 8 rows are not contiguous: they are two groups of 4, 64 rows apart (tr*4 + 0..3 and
//   64 + tr*4 + 0..3), and likewise its columns. Neighbouring threads then read neighbouring
//   16-byte chunks of a shared row, which is free of bank conflicts, and store neighbouring chunks of C.
//
// Launch: grid = (N/128, M/128), block = 256. Shapes: M and N multiples of 128, K a multiple of 8.

constexpr int BM = 128, BN = 128, BK = 8;  // the block's tile of C, and the step along K
constexpr int TM = 8, TN = 8;              // each thread's patch of C
constexpr int THREADS = (BM / TM) * (BN / TN);  // 256

extern "C" __global__ void __launch_bounds__(THREADS)
regblock_matmul(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                int M, int N, int K) {
    __shared__ __align__(16) float As[BK][BM];  // A's tile, transposed: As[k][m]
    __shared__ __align__(16) float Bs[BK][BN];  // B's tile as it is:     Bs[k][n]

    const int tid = threadIdx.x;
    const int tr = tid / 16, tc = tid % 16;  // this thread's place in the 16×16 grid of threads

    A += blockIdx.y * BM * K;  // this block's first row of A, first column of B, corner of C
    B += blockIdx.x * BN;
    C += blockIdx.y * BM * N + blockIdx.x * BN;

    // Who copies what: A's 128×8 tile is 256 float4s, one per thread (row tid/2, columns (tid%2)*4..+3);
    // B's 8×128 tile is also 256 float4s (row tid/32, columns (tid%32)*4..+3).
    const int a_row = tid / 2, a_col = (tid % 2) * 4;
    const int b_row = tid / 32, b_col = (tid % 32) * 4;

    float acc[TM][TN] = {};  // fully unrolled loops keep this array in registers
    for (int k0 = 0; k0 < K; k0 += BK) {
        // TODO: your code here (about 6 lines).
        // Goal: stage this step's tiles with 16-byte loads: A's part transposed into As (so a thread's rows
        //       lie side by side there), B's part as it is into Bs; complete before anyone reads them
        // Stuck? tklab.hint("ch03_register_blocking") in a notebook, or python -m tklab hint ch03_register_blocking.

        // TODO: your code here (about 10 lines).
        // Goal: for each k of the step: this thread's 8 values of A and 8 of B from shared memory in 16-byte
        //       reads, then their 8 x 8 outer product added to acc; finished before the next step overwrites
        //       the tiles
        A += BK;      // next 8 columns of A
        B += BK * N;  // next 8 rows of B
    }

    // Row i of the patch is row (i < 4 ? 0 : 64) + tr*4 + i%4 of the block's tile; columns likewise.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        float* row = C + ((i / 4) * 64 + tr * 4 + i % 4) * N;
        *reinterpret_cast<float4*>(&row[tc * 4]) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        *reinterpret_cast<float4*>(&row[64 + tc * 4]) = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
    }
}
