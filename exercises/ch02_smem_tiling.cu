// GENERATED from solutions/ch02_smem_tiling/ch02_smem_tiling.cu by `python -m tklab exercises`: fill in the TODOs.
// Chapter 2: shared-memory tiling. C = A @ B, fp32, row-major; A is M×K, B is K×N, C is M×N.
//
// The naive kernel of chapter 1 reads every element of A N times and every element of B M times
// from global memory. Here a block of TILE×TILE threads computes a TILE×TILE tile of C and walks
// along K one TILE-wide step at a time: at each step the block copies a TILE×TILE tile of A and one
// of B into shared memory (each thread copies one element of each), waits for everyone, and then
// every thread does TILE multiply-adds out of shared memory. Each global element is now read
// M/TILE (or N/TILE) times instead of M (or N) times: TILE times less traffic.
//
// Launch: grid = (ceil(N/TILE), ceil(M/TILE)), block = (TILE, TILE). Any M, N, K work: threads
// whose element lies outside a matrix load a 0 (which adds nothing) and store nothing.

constexpr int TILE = 32;

extern "C" __global__ void smem_matmul(const float* __restrict__ A, const float* __restrict__ B,
                                       float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];  // As[r][k]: row r of this block's rows of A, column k0 + k
    __shared__ float Bs[TILE][TILE];  // Bs[k][c]: row k0 + k of B, column c of this block's columns

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;  // the element of C this thread owns
    const int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;

    for (int k0 = 0; k0 < K; k0 += TILE) {
        // TODO: your code here (about 3 lines).
        // Goal: stage this step's tile of A in As and of B in Bs, one element per thread, 0 outside the
        //       matrices; the tiles must be complete before anyone reads them
        // Stuck? tklab.hint("ch02_smem_tiling") in a notebook, or python -m tklab hint ch02_smem_tiling.

        // TODO: your code here (about 3 lines).
        // Goal: this thread's share of the dot product over the staged tiles, added to acc; nobody may
        //       overwrite the tiles while others still read them
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
