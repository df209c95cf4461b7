// Chapter 4: bank conflicts and swizzling. out = inᵀ: `in` is M×N, `out` is N×M, fp32, row-major.
//
// A transpose through shared memory: a 32×8 block moves one 32×32 tile. It reads rows of `in`
// (coalesced) into the tile, then writes rows of `out`, which are columns of the tile. Shared memory
// has 32 banks of 4-byte words; word w sits in bank w % 32, and a warp's access takes one pass
// ("wavefront") per distinct word in its busiest bank. With the plain row-major layout
// (r * 32 + c) a whole column sits in one bank, so a warp reading a column makes 32 passes.
//
// Your job is the layout: tile_index(r, c) says which word of the shared buffer holds element
// (r, c) of the tile. It must be one-to-one, fit in TILE_WORDS, and spread both a row (writing
// phase: lanes c = 0..31 of one row r) and a column (reading phase: lanes r = 0..31 of one column c)
// over all 32 banks. The buffer is the tile's 32×32 words and not one more, as a TMA box or a wgmma
// operand is (chapters 07-08): padding does not fit, so the layout is a swizzle, a permutation of
// the words within each row. `python -m tklab check` evaluates your function at compile time and
// counts the conflicts of both phases, so this part is checked even without a GPU.
//
// Launch: grid = (ceil(N/32), ceil(M/32)), block = (32, 8). Any M and N work.

constexpr int TILE = 32;  // the tile is TILE×TILE
constexpr int ROWS = 8;   // rows of threads in a block: each thread moves TILE/ROWS = 4 elements
constexpr int TILE_WORDS = TILE * TILE;  // exactly the tile: no word to spare for padding

// Word of the shared buffer that holds element (r, c) of the tile, 0 <= r, c < TILE.
__host__ __device__ constexpr int tile_index(int r, int c) {
    // BEGIN SOLUTION hint: a one-to-one map from (r, c) to a word of the buffer under which the 32 elements of a row, and the 32 of a column, each fall in 32 different banks
    // STUB: return 0;  // a placeholder: every element lands on the same word
    return r * TILE + (c ^ r);
    // END SOLUTION
}

extern "C" __global__ void transpose(const float* __restrict__ in, float* __restrict__ out, int M, int N) {
    __shared__ float tile[TILE_WORDS];
    const int x0 = blockIdx.x * TILE;  // the tile covers in[y0 .. y0+31][x0 .. x0+31]
    const int y0 = blockIdx.y * TILE;

    // Phase 1: warp j reads row y0 + j of `in` (32 neighbouring floats) into row j of the tile.
    for (int j = threadIdx.y; j < TILE; j += ROWS) {
        const int y = y0 + j, x = x0 + threadIdx.x;
        if (y < M && x < N) tile[tile_index(j, threadIdx.x)] = in[y * N + x];
    }
    __syncthreads();
    // Phase 2: warp j writes row x0 + j of `out` (32 neighbouring floats), which is column j of the tile.
    for (int j = threadIdx.y; j < TILE; j += ROWS) {
        const int oy = x0 + j, ox = y0 + threadIdx.x;
        if (oy < N && ox < M) out[oy * M + ox] = tile[tile_index(threadIdx.x, j)];
    }
}
