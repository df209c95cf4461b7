// tk: a small CUDA tile library for learning to write tensor-core kernels.
//
// One include gives a kernel everything: element types and conversions (tk/common), register, shared
// and global tile types (tk/types), and warp-scope operations on them (tk/ops/warp). Hopper-only pieces
// (TMA, mbarrier, wgmma) live in tk/hopper and tk/ops/warpgroup and are included for sm_90a builds.
// Compiles under NVRTC (no host standard library: CUDA headers and libcu++'s <cuda/std/cstdint> only; our own
// traits in tk/common/traits.cuh keep a cold compile of this header near 0.3 s), C++20, sm_80 and up.
//
// Naming rule: kernels take their knobs as ALL_CAPS macros (-DSTAGES=3, -DHEAD_DIM=64). So that such a
// macro can never silently rewrite the library, the library's only ALL_CAPS names of three or more
// letters are the constants TILE, WARP_THREADS, warpgroup::WARPS and warpgroup::THREADS (and TK_ macros);
// template parameters are CamelCase or one or two letters (T, R, C, ST, ...), which knobs avoid.
// tests/test_tile_compile.py checks this.
#pragma once

#include "tk/common/common.cuh"
#include "tk/types/types.cuh"
#include "tk/ops/warp/warp.cuh"
#include "tk/hopper/hopper.cuh"  // TMA, mbarrier, wgmma, warpgroup ops (empty below sm_90)
