// Carving dynamic shared memory into tiles.
//
// A kernel that needs more than 48 KB of shared memory must take it as dynamic shared memory
// (`extern __shared__`), one untyped block whose start the compiler does not promise to align to 1024
// bytes. The allocator rounds each allocation up to its type's alignment (1024 for swizzled tiles) on
// the shared-space address, which is what the swizzle hardware looks at. Ask at launch for the sum of
// the sizes plus 1024 bytes of slack (dynamic_shared_bytes<...>() computes it).
//
//   extern __shared__ char smem[];
//   tk::shared_allocator alloc(smem);
//   auto& a = alloc.take<tk::st_bf<128, 64>>();
//   auto& bufs = alloc.take<tk::st_bf<64, 128>, 2>();   // an array of two
#pragma once

#include "../../common/common.cuh"

namespace tk {

struct shared_allocator {
    char* ptr;

    __device__ explicit shared_allocator(void* base) : ptr(static_cast<char*>(base)) {}

    /// The next suitably aligned `U` (or array of N of them).
    template <typename U, int N = 1>
    __device__ auto& take() {
        constexpr uint32_t a = alignof(U);
        ptr += (a - smem_u32(ptr) % a) % a;
        auto* p = reinterpret_cast<U(*)[N]>(ptr);
        ptr += sizeof(U) * N;
        if constexpr (N == 1) return (*p)[0];
        else return *p;
    }
};

/// Dynamic shared bytes to request at launch for one of each type, with slack for the first alignment.
template <typename... Us>
__host__ __device__ constexpr int dynamic_shared_bytes() {
    int total = 1024;
    ((total = (total + int(alignof(Us)) - 1) / int(alignof(Us)) * int(alignof(Us)) + int(sizeof(Us))), ...);
    return total;
}

}  // namespace tk
