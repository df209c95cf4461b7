// Hopper (sm_90a) additions to the tile library: TMA copies (and their multicast to a cluster), mbarriers,
// clusters, the interleaved layout, wgmma descriptors and instructions, the producer/consumer pipeline,
// and warpgroup-scope operations.
// Everything here needs an sm_90 target (wgmma and setmaxnreg: sm_90a). tk.cuh always includes this
// file; the guard below keeps it empty in device passes for older GPUs, so sm_80 builds still compile.
#pragma once

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900

#include "cluster.cuh"
#include "descriptor.cuh"
#include "fence.cuh"
#include "interleave.cuh"
#include "mbarrier.cuh"
#include "pipeline.cuh"
#include "tensor_map.cuh"
#include "tma.cuh"
#include "tma_multicast.cuh"
#include "wgmma_instr.cuh"
#include "../ops/warpgroup/warpgroup.cuh"

#endif  // sm_90+
