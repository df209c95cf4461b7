// Chapter 08, steps 3-5: the GEMM as a persistent kernel -- TMA-store epilogue, L2 tile order, clusters.
//
//   C (M x N, bf16) = A (M x K, bf16, row-major) * B (K x N, bf16, row-major), fp32 accumulation.
//
// Step 2's block (a producer warpgroup, two consumer warpgroups, 128 x 256 tiles, a ring of STAGES
// stages), changed in three ways:
//   * persistent: the grid is as many blocks as fit on the GPU at once (one per SM), and each block
//     walks tile after tile. The producer runs on into the next tile's K-slices while the consumers
//     write the last tile out, so the ring never drains between tiles, and no wave of blocks ends half
//     empty.
//   * the epilogue goes through shared memory: each consumer rounds its 64 x 256 rows to bf16 into a
//     64 x 64 staging tile (stmatrix) and one lane sends it out with a TMA store, which runs on while
//     the next 64 columns are written, and while the next tile's products start. The copy engine skips
//     rows and columns past the end of C, and TMA loads fill past-the-end A and B with zeros, so any
//     M, N, K works (N and K multiples of 8: TMA needs rows 16-byte aligned).
//   * GROUP_M: the tiles in flight are taken GROUP_M rows of (cluster) tiles at a time (1: row by row), so they
//     share panels of A and B in L2 (tile_order.cuh).
//   * CLUSTER = 2: blocks run in pairs on tiles stacked in M, which read the same slices of B. Each block
//     of a pair loads half of every B slice and multicasts it to both; a stage is refilled only when the
//     consumers of both blocks have handed it back.
//   * STREAM_K = 1 (an option, measured against the plain walk): the tiles of the last, partial wave are
//     split along K among all blocks (tk::gemm_walk), so no block idles while a few finish the last tiles.
//     A piece that stops inside a tile leaves its fp32 sum in `partials` (one 64 x 256 slot per consumer
//     of each block) and raises its flag; the piece that ends the tile waits for those flags, adds the
//     partials in worker order (deterministic) and writes C. Each block's run is at least SK_MIN_SLICES
//     K-slices, and the split is made only where it takes SK_MIN_SAVED K-slices off the last wave.
#include "tk.cuh"

using namespace tk;

#ifndef CLUSTER
#define CLUSTER 2  // blocks per cluster, stacked in M: 1 (no cluster) or 2
#endif
#ifndef GROUP_M
#define GROUP_M (16 / CLUSTER)  // rows of cluster tiles walked together: 16 block rows
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef STREAM_K
#define STREAM_K 0  // 1: split the last wave's tiles along K among the blocks (stream-K); 0: plain walk
#endif
#ifndef SK_MIN_SLICES
#define SK_MIN_SLICES 8  // least K-slices (of BK) per piece of a split tile
#endif
#ifndef SK_MIN_SAVED
#define SK_MIN_SAVED 2  // split only if the last wave gets at least this many K-slices shorter
#endif
#ifndef IN_FLIGHT
#define IN_FLIGHT 0  // wgmma groups a consumer leaves running when it waits (0 or 1; step 2's knob)
#endif
#ifndef C_BUFFERS
#define C_BUFFERS 2  // staging tiles per consumer: 2 (one written while one is stored) up to BN / CN
#endif
constexpr int BM = 128, BN = 256, BK = 64;  // block tile; K-slice per stage
constexpr int CONSUMERS = 2;                // consumer warpgroups, 64 rows of the tile each
constexpr int CN = 64;                      // columns of C per TMA store
static_assert(CLUSTER == 1 || CLUSTER == 2, "CLUSTER: 1 or 2 blocks");
static_assert(IN_FLIGHT == 0 || IN_FLIGHT == 1, "IN_FLIGHT: 0 or 1 wgmma groups left running");
static_assert(C_BUFFERS >= 1 && C_BUFFERS <= BN / CN, "C_BUFFERS: 1 to BN / CN staging tiles");
using split = warpgroup::register_split<40, 232, CONSUMERS>;

using a_tile = st_bf<BM / CONSUMERS, BK>;  // 64 x 64
using b_tile = st_bf<BK, BN>;              // 64 x 256: four 64 x 64 panels (TMA boxes): two per block of a pair
using c_tile = st_bf<BM / CONSUMERS, CN>;  // 64 x 64 staging tile of C
struct stage {
    a_tile a[CONSUMERS];
    b_tile b;
};
struct smem_layout {
    stage stages[STAGES];
    c_tile c[CONSUMERS][C_BUFFERS];  // per consumer: one staging tile is written while another is being stored
    pipeline<STAGES> pipe;
};
/// What the launch must ask for (read by tklab.gemm from the compiled module: one source of truth).
extern "C" __device__ int gemm_shared_bytes = dynamic_shared_bytes<smem_layout>();

/// What the launch must allocate for STREAM_K = 1: per block, CONSUMERS slots of 64 x 256 floats (the partial
/// sums) and CONSUMERS flags, zeroed once (each owner sets a flag back to 0 after reading its slot).
extern "C" __device__ int gemm_partial_floats = CONSUMERS * (BM / CONSUMERS) * BN;
extern "C" __device__ int gemm_flags = CONSUMERS;

/// A flag written after the data it guards, and read before it (gpu scope: the other side is another SM).
__device__ inline void publish(int* flag) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(flag), "r"(1) : "memory");
}
__device__ inline int published(const int* flag) {
    int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(flag) : "memory");
    return v;
}

#if CLUSTER > 1
#define CLUSTER_SHAPE __cluster_dims__(CLUSTER, 1, 1)
#else
#define CLUSTER_SHAPE
#endif

/// Where a block is in the walk. The walk is over cluster tiles of (CLUSTER * 128) x 256; block `rank` of a
/// cluster takes tile row `rank` of each. Every block of a cluster walks the same cluster tiles, so their rings
/// stay in step; block (cluster) `first` walks its items: whole tiles, then (STREAM_K) its pieces of the last
/// wave. Computed in each branch after setmaxnreg: a value live across the producer's drop to 40 registers is
/// spilled.
struct walk_plan {
    tile_order order;
    gemm_walk walk;
    int rank, first;
};
__device__ inline walk_plan plan(int M, int N, int K) {
    const tile_order order{(M + CLUSTER * BM - 1) / (CLUSTER * BM), (N + BN - 1) / BN, GROUP_M};
    const int step = CLUSTER > 1 ? cluster::count() : int(gridDim.x);
    const gemm_walk walk{order.count(), (K + BK - 1) / BK, step, STREAM_K ? SK_MIN_SLICES : 0, SK_MIN_SAVED};
    return {order, walk, CLUSTER > 1 ? cluster::rank() : 0, CLUSTER > 1 ? cluster::id() : int(blockIdx.x)};
}

/// Item n of block (cluster) w. Without STREAM_K, the plain walk spelled out, so the compiler knows every
/// item starts at K-slice 0 (the default steps' K loop stays as it was).
__device__ inline gemm_item item(const gemm_walk& walk, int w, int n) {
    if constexpr (STREAM_K) return walk(w, n);
    else return {w + n * walk.blocks, 0, walk.k_slices, w, false};
}

extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * warpgroup::THREADS, 1) CLUSTER_SHAPE
gemm(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
     const __grid_constant__ CUtensorMap map_c, int M, int N, int K, float* partials, int* flags) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    smem_layout& sm = alloc.take<smem_layout>();

    if (threadIdx.x == 0) sm.pipe.init(CONSUMERS * warpgroup::WARPS * CLUSTER);  // every consumer warp of the cluster frees a stage
    if constexpr (CLUSTER > 1) cluster::sync();  // all barriers of the pair exist before either signals the other's
    else __syncthreads();

    if (warpgroup::groupid() == 0) {  // ---- producer ----
        split::producer();
        if (warpgroup::warp() == 0 && warpgroup::elect_one()) {
            const walk_plan p = plan(M, N, K);
            const tile_order& order = p.order;
            const gemm_walk& walk = p.walk;
            const int rank = p.rank, first = p.first;
            ring_cursor<STAGES> at;
            const int items = walk.items(first);
            for (int n = 0; n < items; ++n) {
                const gemm_item it = item(walk, first, n);
                const coord t = order(it.tile);
                const int row = t.r * CLUSTER + rank;  // this block's tile row
                for (int k = it.k_begin; k < it.k_end; ++k, at.advance()) {
                    stage& s = sm.stages[at.stage];
                    mbarrier& full = sm.pipe.full[at.stage];
                    wait(sm.pipe.empty[at.stage], at.phase ^ 1);
                    tma::expect(full, s.a[0], s.a[1], s.b);  // all of B arrives: our half and our partner's
                    for (int w = 0; w < CONSUMERS; ++w) tma::load_async(s.a[w], map_a, full, {row * CONSUMERS + w, k});
                    if constexpr (CLUSTER > 1) tma::load_async_multicast(s.b, map_b, full, {k, t.c}, rank, CLUSTER);
                    else tma::load_async(s.b, map_b, full, {k, t.c});
                }
            }
            // Do not exit while someone may still touch this block's shared memory: wait until every stage
            // we filled was handed back -- by our consumers and, in a cluster, by our partner's, whose
            // arrivals land on our barriers.
            for (int s = 0; s < STAGES; ++s, at.advance()) wait(sm.pipe.empty[at.stage], at.phase ^ 1);
        }
        return;
    }

    // ---- consumers ----
    split::consumer();
    const walk_plan p = plan(M, N, K);
    const tile_order& order = p.order;
    const gemm_walk& walk = p.walk;
    const int rank = p.rank, first = p.first;
    const int me = __shfl_sync(0xffffffff, warpgroup::groupid() - 1, 0);  // uniform: see gemm_wgmma.cu
    const bool leader = warpgroup::threadid() == 0;  // issues this warpgroup's TMA stores, and waits for them
    const int items = __shfl_sync(0xffffffff, walk.items(first), 0);  // uniform (a uniform register, not a spill)
    rt_fl<16, BN> acc;                               // this warp's 16 rows of the warpgroup's 64 x 256
    ring_cursor<STAGES> at, reading;  // reading: the oldest stage our wgmmas may still read
    const auto hand_back = [&] {      // that stage goes back to the producer
        if constexpr (CLUSTER > 1) cluster::arrive_all(sm.pipe.empty[reading.stage], CLUSTER);  // both blocks' copies write here
        else sm.pipe.release(reading.stage);
        reading.advance();
    };
    for (int n = 0; n < items; ++n) {
        const gemm_item it = item(walk, first, n);
        const coord t = order(it.tile);
        const int row = t.r * CLUSTER + rank;
        // The same in every lane; __shfl_sync tells the compiler so (the walk's 64-bit divisions would not),
        // and the K loop keeps its counters and descriptors in uniform registers (see gemm_wgmma.cu).
        const int k_begin = STREAM_K ? __shfl_sync(0xffffffff, it.k_begin, 0) : 0;
        const int k_end = STREAM_K ? __shfl_sync(0xffffffff, it.k_end, 0) : it.k_end;
        for (int k = k_begin; k < k_end; ++k, at.advance()) {
            wait(sm.pipe.full[at.stage], at.phase);
            warpgroup::mma_AB(acc, sm.stages[at.stage].a[me], sm.stages[at.stage].b, k > k_begin);  // = first, += after
            if constexpr (IN_FLIGHT == 0) warpgroup::mma_async_wait<0>(acc);
            else warpgroup::mma_async_wait<IN_FLIGHT>();  // the previous group is done, this one runs on
            if (k - k_begin >= IN_FLIGHT) hand_back();
        }
        if constexpr (IN_FLIGHT > 0) {  // the last group of the tile, then its stage
            warpgroup::mma_async_wait<0>(acc);
            if (k_end > k_begin) hand_back();
        }
#if STREAM_K
        // Slots: one per consumer of each block; thread i keeps its registers at float4 i, 128 + i, ...
        // (the same thread reads them back: the fragment layout never matters, and the accesses coalesce).
        constexpr int QUADS = rt_fl<16, BN>::n_regs / 2;  // float4s per thread
        const auto slot = [&](int worker) {
            return reinterpret_cast<float4*>(partials) + size_t((worker * CLUSTER + rank) * CONSUMERS + me) * QUADS * 128;
        };
        const int flag = (first * CLUSTER + rank) * CONSUMERS + me;
        if (it.partial) {  // not the tile's last K-slices: leave the sum for the owner, write no C
            float4* out = slot(first) + warpgroup::threadid();
#pragma unroll
            for (int q = 0; q < QUADS; ++q)
                __stcg(out + q * 128, make_float4(acc.reg(2 * q).x, acc.reg(2 * q).y, acc.reg(2 * q + 1).x,
                                                  acc.reg(2 * q + 1).y));
            __threadfence();
            warpgroup::sync_group<1>(me);  // every thread's partial is out ...
            if (leader) publish(flags + flag);  // ... before the flag says so
            continue;
        }
        // The owner adds the earlier pieces, in worker order. Every thread acquires the flag itself, and a warp
        // leaves the wait only all together (__all_sync: a uniform branch, so the K loop above keeps its uniform
        // registers; a wait in one divergent thread cost 16 R2UR per slice there).
        for (int w = it.first_sharer; w < first; ++w)
            while (!__all_sync(0xffffffff, published(flags + (w * CLUSTER + rank) * CONSUMERS + me))) __nanosleep(64);
        if (it.first_sharer < first) {
            warpgroup::sync_group<1>(me);  // nobody reads a flag any more: set them back for the next launch
            if (leader)
#pragma unroll 1
                for (int w = it.first_sharer; w < first; ++w) flags[(w * CLUSTER + rank) * CONSUMERS + me] = 0;
        }
        for (int w = it.first_sharer; w < first; ++w) {
            const float4* in = slot(w) + warpgroup::threadid();
#pragma unroll
            for (int q = 0; q < QUADS; ++q) {
                const float4 v = __ldcg(in + q * 128);
                acc.reg(2 * q).x += v.x, acc.reg(2 * q).y += v.y, acc.reg(2 * q + 1).x += v.z, acc.reg(2 * q + 1).y += v.w;
            }
        }
#endif
        // Epilogue: 64 columns at a time, taking our staging tiles in turn.
#pragma unroll
        for (int j = 0; j < BN / CN; ++j) {
            c_tile& out = sm.c[me][j % C_BUFFERS];
            if (leader) tma::store_wait_read<C_BUFFERS - 1>();  // the store that last read `out` is done reading it
            warpgroup::sync_group<1>(me);
            warpgroup::store(out, columns<CN>(acc, j));  // round to bf16, stmatrix
            fence_proxy_async();                          // our writes, then the copy engine's reads
            warpgroup::sync_group<1>(me);
            if (leader) {
                tma::store_async(map_c, out, {row * CONSUMERS + me, t.c * (BN / CN) + j});
                tma::store_commit();
            }
        }
    }
    if (leader) tma::store_wait_read<0>();  // the staging tiles must outlive the stores reading them
}
