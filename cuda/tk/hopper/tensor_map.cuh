// CUtensorMap: the 128-byte descriptor of a global tensor that TMA copies tiles of.
//
// The host builds it (tklab.tma.tensor_map -> cuTensorMapEncodeTiled) and passes it BY VALUE:
//     __global__ void k(const __grid_constant__ CUtensorMap tmap, ...)
// __grid_constant__ keeps it in the kernel's parameter space, where the copy engine can read it by
// address; a copy in a register or in local memory would not work. NVRTC cannot include <cuda.h> (it
// pulls in the host C library), so we declare the same 64-byte-aligned, 128-byte struct here.
#pragma once

#ifndef __cuda_cuda_h__
typedef struct CUtensorMap_st {
    alignas(64) unsigned long long opaque[16];
} CUtensorMap;
#endif

static_assert(sizeof(CUtensorMap) == 128, "a tensor map is 128 bytes");
