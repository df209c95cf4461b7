// Step 1 of the emulator's compile (preprocessing for the rewrite): the CUDA keywords as markers or
// nothing, and the CUDA compiler's macros. System and CUDA headers are stubs in this folder: their
// declarations come in step 2 (tkemu/prelude.h), so the rewritten text holds only the learner's code
// and the tile library, expanded.
#pragma once
#define __CUDACC__ 1
#define __CUDACC_RTC__ 1
#define __CUDACC_VER_MAJOR__ 13
#define __CUDACC_VER_MINOR__ 0
#define CUDART_VERSION 13000
#define __TKEMU__ 1
#define __cuda_cuda_h__ 1  // CUtensorMap comes from tkemu/prelude.h
#define __global__ __tkemu_global__
#define __device__
#define __host__
#define __shared__ __tkemu_shared__
#define __constant__
#define __managed__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __maxnreg__(...)
#define __grid_constant__
#define __align__(n) alignas(n)
#define __cluster_dims__(...)
#define printf ::tkemu::device_printf
