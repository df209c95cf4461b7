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
