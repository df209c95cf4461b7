// A persistent grid's work list for attention: one block per SM, each walking (query block, head) items.
//
// A grid of (query blocks, heads, batch) blocks leaves the GPU to schedule them, and under a causal mask
// the blocks differ in cost (query block i reads i + 1 key blocks): the last wave runs half-empty while a
// few heavy blocks finish. A persistent grid launches one block per SM and lets each block walk a list:
//
//   const tile_scheduler work{q_blocks, heads, batch, section};
//   for (int i = blockIdx.x; i < work.count(); i += gridDim.x) { const work_item w = work(i); ... }
//
// Item i is (w.b, w.h, w.q_block). The list is cut into sections of `section` heads
// (batch and heads flattened); inside a section the HEAVIEST query blocks come first, the heads of one
// query block next to each other. Why both:
//   * longest first: block p takes items p, p + grid, p + 2 grid, ...; the items handed out last are
//     the lightest, so the blocks finish close together (the classic longest-processing-time rule);
//   * sections: the ~132 items in flight at once belong to `section` heads, so their K and V rows come
//     from L2 instead of DRAM. Walking all heads of query block 63 first would put 132 different heads'
//     K and V in flight (4 MB each at N = 8192, d = 128): far more than L2 holds.
// The kernel picks `section` so that a section's K and V fit a share of L2 (see section_for).
// Everything is constexpr, so the order can be checked on the host (tests/).
#pragma once

#include "gl.cuh"

namespace tk {

struct work_item {
    int b, h, q_block;
};

struct tile_scheduler {
    int q_blocks, heads, batch, section;  // query blocks per head, heads, batch, heads per section

    __host__ __device__ constexpr int count() const { return q_blocks * heads * batch; }

    /// Item i (0 .. count()-1).
    __host__ __device__ constexpr work_item operator()(int i) const {
        const int per_section = q_blocks * section;
        const int first = (i / per_section) * section;  // the section's first (b, h), flattened
        const int all = heads * batch;
        const int width = all - first < section ? all - first : section;  // the last section may be narrower
        const int r = i - first * q_blocks;                               // position inside the section
        const int bh = first + r % width;
        return {bh / heads, bh % heads, q_blocks - 1 - r / width};
    }

    /// Heads per section so that one section's K and V (2 x seq x d bf16 each head) take about
    /// `budget` bytes of L2 (at least one head).
    __host__ __device__ static constexpr int section_for(int seq, int head_dim, int budget = 16 << 20) {
        const int per_head = 4 * seq * head_dim;
        return per_head >= budget ? 1 : budget / per_head;
    }
};

// ---- a GEMM's persistent walk with its last wave split along K (stream-K style) ---------------------
//
// `tiles` output tiles on `blocks` resident blocks: whole waves of tiles first (block w takes tiles w,
// w + blocks, ...). When the last wave is partial (tiles % blocks tiles for `blocks` blocks), a plain walk
// leaves the other blocks idle for a whole tile. Here the K-slices of those last tiles are dealt out
// instead, an equal contiguous run of (tile, K-slice) units to each of `workers()` blocks, so a tile may be
// computed in pieces by consecutive workers:
//
//   const gemm_walk walk{tiles, k_slices, blocks, min_slices};
//   for (int n = 0; n < walk.items(w); ++n) { const gemm_item it = walk(w, n); ... }
//
// it.tile is the tile's number in the walk (tile_order), K-slices [it.k_begin, it.k_end). A piece that
// stops before the tile's end is a PARTIAL: its fp32 sum goes to a workspace slot of its worker. The
// piece that ends the tile (its worker has the highest number among the tile's pieces) is the OWNER: it
// adds the partials of workers it.first_sharer .. w-1, in that order (the same sums in the same order on
// every run), and writes C. A worker does its partial piece FIRST and its owner piece last, so by the
// time an owner waits, its lower neighbours have long published theirs; an owner only ever waits for
// lower-numbered workers, so the walk cannot deadlock while all blocks are resident (and an emulator
// running blocks one after another in order never waits at all).
// `min_slices` bounds each worker's run from below (each partial costs a 128 x 256 fp32 round trip
// through L2, so tiny runs would cost more than they save; a piece cut by a run's edge may be shorter);
// the split is not done (`workers() == 0`) when it cannot use more blocks than there are leftover tiles,
// or when it would shorten the last wave by fewer than `min_saved` K-slices (the partials' round trip costs
// about one K-slice on each side: below that a plain walk is as fast).
// Everything is constexpr: tests/ check the walk on the host.

struct gemm_item {
    int tile;            // the tile's number in the walk
    int k_begin, k_end;  // K-slices of this piece
    int first_sharer;    // owner of a split tile: the first worker whose partial it adds (== own worker: none)
    bool partial;        // stops before the tile's last K-slice: store the fp32 sum, do not write C
};

struct gemm_walk {
    int tiles, k_slices, blocks, min_slices;  // min_slices <= 0: never split (a plain persistent walk)
    int min_saved = 0;                        // least K-slices the split must take off the last wave
    // 32-bit arithmetic (the producer warp runs this with 40 registers): leftover tiles x k_slices x blocks must
    // stay below 2^31, i.e. K below ~7.8 M at 132 blocks (tklab.gemm.check_shapes refuses more).

    __host__ __device__ constexpr int leftover() const { return tiles % blocks; }
    /// Blocks sharing the leftover tiles' K-slices (0: no split).
    __host__ __device__ constexpr int workers() const {
        const int r = leftover();
        if (min_slices <= 0 || r == 0) return 0;
        const int w = r * k_slices / min_slices;
        const int n = w < blocks ? w : blocks;
        const int longest = n > 0 ? (r * k_slices + n - 1) / n : k_slices;  // the longest run
        return n > r && longest <= k_slices - min_saved ? n : 0;          // else a plain walk is as good
    }
    __host__ __device__ constexpr int whole_tiles() const { return workers() ? tiles - leftover() : tiles; }
    __host__ __device__ constexpr int units() const { return (tiles - whole_tiles()) * k_slices; }
    /// First unit (leftover tile * k_slices + K-slice) of worker w; w == workers() gives the end.
    __host__ __device__ constexpr int begin(int w) const { return units() * w / workers(); }
    /// The worker whose run holds unit u.
    __host__ __device__ constexpr int worker_of(int u) const { return ((u + 1) * workers() + units() - 1) / units() - 1; }

    /// Work items of block w: its whole tiles, then (a worker) its pieces.
    __host__ __device__ constexpr int items(int w) const {
        const int whole = w < whole_tiles() ? (whole_tiles() - w + blocks - 1) / blocks : 0;
        if (w >= workers()) return whole;
        return whole + (begin(w + 1) - 1) / k_slices - begin(w) / k_slices + 1;
    }

    /// Item n of block w.
    __host__ __device__ constexpr gemm_item operator()(int w, int n) const {
        const int whole = w < whole_tiles() ? (whole_tiles() - w + blocks - 1) / blocks : 0;
        if (n < whole) return {w + n * blocks, 0, k_slices, w, false};
        const int s = begin(w), e = begin(w + 1);
        const int first = s / k_slices, last = (e - 1) / k_slices;
        const bool ends_inside = e - last * k_slices < k_slices;  // its last piece is a partial
        const int j = n - whole;
        const int t = ends_inside ? (j == 0 ? last : first + j - 1) : first + j;
        const int kb = t == first ? s - t * k_slices : 0;
        const int ke = t == last ? e - t * k_slices : k_slices;
        const int sharer = kb > 0 ? worker_of(t * k_slices) : w;
        return {whole_tiles() + t, kb, ke, sharer, ke < k_slices};
    }
};

}  // namespace tk

namespace tk {

// Under a causal mask the sections above deal badly: block p takes items p, p + grid, ... and each section
// starts heavy again, so one block can draw the heaviest item of every section while its neighbour draws
// the lightest (a model of the dealing puts the slowest block 25-29 % above the average at d = 128).
// longest_first orders ALL items by cost, heaviest query blocks first over every (batch, head), and deals
// them in a snake: round r hands item r * grid + p to block p when r is even and to block grid - 1 - p
// when r is odd, so a block that drew a heavy item in one round draws a light one in the next (the model:
// within 1-3 % of the average). L2 still shares K and V: the ~132 items in flight are a few neighbouring
// query blocks of every head, which read the same rows of K and V at about the same time.
struct longest_first {
    int q_blocks, heads, batch;

    __host__ __device__ constexpr int count() const { return q_blocks * heads * batch; }

    /// Item i of the list: query blocks descending, the (batch, head) pairs of one query block neighbours.
    __host__ __device__ constexpr work_item operator()(int i) const {
        const int all = heads * batch, bh = i % all;
        return {bh / heads, bh % heads, q_blocks - 1 - i / all};
    }

    /// The list position of block `block`'s item number `r` on a grid of `grid` blocks (may be >= count():
    /// only the last round is partial, so the first such position ends the block's walk).
    __host__ __device__ static constexpr int dealt(int r, int block, int grid) {
        return r * grid + (r & 1 ? grid - 1 - block : block);
    }
};

}  // namespace tk
