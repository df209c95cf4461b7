// GENERATED from solutions/ch04_debug_padded/ch04_debug_padded.cu by `python -m tklab exercises`.
// DEBUGGING EXERCISE: this program has one bug. Check it as it is (tklab.check("ch04_debug_padded")
// or python -m tklab check ch04_debug_padded), read what the verdict says it did, then find the bug
// and repair it.
// What it should do: out = the transpose of in, for any M and N, through a tile whose rows are PITCH words apart
// Stuck? tklab.hint("ch04_debug_padded") in a notebook, or python -m tklab hint ch04_debug_padded.
// Chapter 4, debugging: a padded transpose. out = inᵀ: `in` is M×N, `out` is N×M, fp32, row-major.
//
// Section 5's transpose: a 32×8 block moves one 32×32 tile through shared memory. Warp j reads rows
// of `in` (coalesced) into rows of the tile, then writes rows of `out`, which are columns of the tile.
// A column of a tile whose rows are 32 words apart sits in one bank (32 passes for one warp), so the
// rows here are PITCH = 33 words apart: element (r, c) of the tile is word r * PITCH + c, and the 32
// elements of a column fall in 32 different banks.
//
// Launch: grid = (ceil(N/32), ceil(M/32)), block = (32, 8). Any M and N work.

constexpr int TILE = 32;           // the tile is TILE×TILE
constexpr int ROWS = 8;            // rows of threads in a block: each thread moves TILE/ROWS = 4 elements
constexpr int PITCH = TILE + 1;    // words from one row of the tile to the next: one spare word a row

extern "C" __global__ void transpose_padded(const float* __restrict__ in, float* __restrict__ out, int M, int N) {
    __shared__ float tile[TILE * PITCH];
    const int x0 = blockIdx.x * TILE;  // the tile covers in[y0 .. y0+31][x0 .. x0+31]
    const int y0 = blockIdx.y * TILE;

    // Phase 1: warp j reads row y0 + j of `in` (32 neighbouring floats) into row j of the tile.
    for (int j = threadIdx.y; j < TILE; j += ROWS) {
        const int y = y0 + j, x = x0 + threadIdx.x;
        if (y < M && x < N) tile[j * PITCH + threadIdx.x] = in[y * N + x];
    }
    __syncthreads();
    // Phase 2: warp j writes row x0 + j of `out` (32 neighbouring floats), which is column j of the tile.
    for (int j = threadIdx.y; j < TILE; j += ROWS) {
        const int oy = x0 + j, ox = y0 + threadIdx.x;
        if (oy < N && ox < M) out[oy * M + ox] = tile[threadIdx.x * TILE + j];
    }
}
