// Chapter 2, debugging: a row vector times a matrix, y = x A, fp32. x has K entries, A is K×N
// (row-major), y has N entries.
//
// One thread per column of A: at every step of its loop, thread `col` reads A[k][col], so the 32
// threads of a warp read 32 neighbouring floats of one row of A (coalesced, section 1). Every thread
// needs every entry of x, so the block stages x in shared memory, TILE entries at a time: each thread
// copies one entry, the block waits for everyone, and then every thread reads all TILE of them (one
// word for the whole warp: a broadcast, no bank conflict).
//
// Launch: grid = ceil(N/TILE), block = TILE. Any K and N work: the last slice of x is padded with
// zeros, and threads past the last column copy their entry of x but compute nothing.

constexpr int TILE = 128;

extern "C" __global__ void vecmat(const float* __restrict__ x, const float* __restrict__ A,
                                  float* __restrict__ y, int K, int N) {
    __shared__ float xs[TILE];  // entries k0 .. k0 + TILE - 1 of x
    const int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;

    for (int k0 = 0; k0 < K; k0 += TILE) {
        xs[threadIdx.x] = k0 + threadIdx.x < K ? x[k0 + threadIdx.x] : 0.0f;
        __syncthreads();  // the slice is complete before anyone reads it

        const int steps = min(TILE, K - k0);
        if (col < N) {
            for (int j = 0; j < steps; ++j) acc += xs[j] * A[(k0 + j) * N + col];
        }
        // BEGIN BUG hint: y = x A for any K and N, every entry of x read from a slice staged in shared memory
        __syncthreads();  // nobody overwrites the slice while others still read it
        // END BUG
    }
    if (col < N) y[col] = acc;
}
