// dave's ch02: does not compile (an undeclared name on line 13).
constexpr int TILE = 32;

extern "C" __global__ void smem_matmul(const float* __restrict__ A, const float* __restrict__ B,
                                       float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = A[row * K + k0 + tx];
        Bs[ty][tx] = B[(k0 + ty) * N + colum];
        __syncthreads();
        // (the product over the tile: not written yet)
        __syncthreads();
    }
    C[row * N + col] = acc;
}
