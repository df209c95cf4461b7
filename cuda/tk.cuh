// tk: a small CUDA tile library for learning to write tensor-core kernels.
//
// One include gives a kernel everything: element types and conversions (tk/common), register, shared
// and global tile types (tk/types), and warp-scope operations on them (tk/ops/warp). Hopper-only pieces
// (TMA, mbarrier, wgmma) live in tk/hopper and tk/ops/warpgroup and are included for sm_90a builds.
// Compiles under NVRTC (no host standard library: CUDA headers and libcu++'s <cuda/std/cstdint> only; our own
// traits in tk/common/traits.cuh keep a cold compile of this header near 0.3 s), C++20, sm_80 and up.
#pragma once

#include "tk/common/common.cuh"
#include "tk/types/types.cuh"
#include "tk/ops/warp/warp.cuh"
#include "tk/hopper/hopper.cuh"  // TMA, mbarrier, wgmma, warpgroup ops (empty below sm_90)
