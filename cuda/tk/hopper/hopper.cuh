// Hopper (sm_90a) additions to the tile library: TMA copies, mbarriers, the interleaved layout, wgmma
// descriptors and instructions, the producer/consumer pipeline, and warpgroup-scope operations.
// Everything here needs an sm_90a target; tk.cuh includes it only when compiling for one.
#pragma once

#include "descriptor.cuh"
#include "fence.cuh"
#include "interleave.cuh"
#include "mbarrier.cuh"
#include "pipeline.cuh"
#include "tensor_map.cuh"
#include "tma.cuh"
#include "wgmma_instr.cuh"
#include "../ops/warpgroup/warpgroup.cuh"
