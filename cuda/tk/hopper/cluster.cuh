// Thread-block clusters: a few blocks that run at the same time, on SMs of one GPC, and can reach each
// other's shared memory.
//
// A kernel declares its cluster shape at compile time (`__cluster_dims__(2, 1, 1)` on the kernel: an
// ordinary launch then starts blocks two by two; the grid must be a multiple). Inside a cluster each
// block has a rank (0 .. size-1). What the blocks can do together:
//   * one TMA copy can land in several blocks' shared memory at once (multicast, tma_multicast.cuh):
//     two blocks that need the same tile of B fetch it from L2 once instead of twice;
//   * a thread can arrive on an mbarrier in another block (arrive_remote below): how a block tells the
//     others "I am done reading this stage" when their copies write into its shared memory;
//   * cluster_sync() is a barrier over every thread of every block in the cluster.
// Rules that keep this safe: before any block signals another's barrier or writes its shared memory,
// every block must have initialised its barriers (cluster_sync() after the init); and no block may exit
// while another can still arrive on its barriers or copy into it (before exiting, a producer waits until
// every stage it filled was handed back -- which takes every block's consumers -- as the GEMM of
// chapter 08 does after its last tile).
// A kernel without __cluster_dims__ runs in clusters of one: rank 0 of 1, and all of this still works.
#pragma once

#include "mbarrier.cuh"

namespace tk::cluster {

// Where a block stands in its cluster and its cluster in the grid: each is a 32-bit special register, named in
// the instruction itself (`mov.u32 %0, %cluster_ctarank;`), so one line per register says which it reads.
#define TK_CLUSTER_REGISTER(name, reg)                                   \
    __device__ inline int name() {                                      \
        uint32_t v;                                                     \
        asm volatile("mov.u32 %0, %%" reg ";\n" : "=r"(v));             \
        return int(v);                                                  \
    }
TK_CLUSTER_REGISTER(rank, "cluster_ctarank")    // this block's rank inside its cluster (0 .. size() - 1)
TK_CLUSTER_REGISTER(size, "cluster_nctarank")   // blocks per cluster
TK_CLUSTER_REGISTER(id, "clusterid.x")          // which cluster of the (one-dimensional) grid this block is in
TK_CLUSTER_REGISTER(count, "nclusterid.x")      // how many clusters the grid has
#undef TK_CLUSTER_REGISTER

/// Barrier over every thread of every block of the cluster: shared-memory writes before it (mbarrier
/// inits included) are visible to all blocks after it. Every thread must call it, warps converged.
__device__ inline void sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

/// Count one arrival on the barrier at the same place as `bar`, in the shared memory of block `cta` of
/// this cluster (mapa turns our address into that block's). A plain arrive: a release at CTA scope (the PTX
/// default). What it hands back is a stage whose only readers were this warp's wgmma groups, retired by
/// wgmma.wait_group before the call, so no read of it is outstanding when the arrival leaves. The strict
/// memory-model form, `mbarrier.arrive.release.cluster`, also orders this thread's accesses for the other
/// block -- and made chapter 08's step 5 markedly slower on the H200 (chapter 08 section 5 quotes the runs, from
/// bench/results/): a cluster-scope fence on every release. CUTLASS's cluster barrier uses the plain form too.
__device__ inline void arrive_remote(mbarrier& bar, int cta) {
    asm volatile(
        "{\n .reg .b32 remote;\n"
        " mapa.shared::cluster.u32 remote, %0, %1;\n"
        " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
        ::"r"(smem_u32(&bar)), "r"(cta)
        : "memory");
}

/// Lane 0 of the calling warp arrives once on `bar` in every block of the cluster (this one included):
/// a consumer warp handing back a stage that every block's copies write into.
__device__ inline void arrive_all(mbarrier& bar, int blocks) {
    if (laneid() == 0) {
        for (int cta = 0; cta < blocks; ++cta) arrive_remote(bar, cta);
    }
}

}  // namespace tk::cluster
