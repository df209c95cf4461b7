// TMA probes: load a tile with TMA and write it back with plain stores through st's own address
// function (so a wrong swizzle, panel order or box shows up as misplaced elements); store and
// store-add a tile that plain stores put into shared memory. One block per tile, 128 threads.
#include "tk.cuh"

using namespace tk;

/// Plain row-major, aligned for TMA (which needs 128-byte-aligned shared addresses); the same as
/// tk::swizzle_none, kept explicit here so the probe states what it relies on.
struct row_major_128 {
    static constexpr int bytes = 0;
    static constexpr int alignment = 128;
    __host__ __device__ static constexpr uint32_t apply(uint32_t byte) { return byte; }
};

template <shared_tile ST>
__device__ void load_then_plain_store(const CUtensorMap& map, typename ST::dtype* out, int ld) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    ST& tile = alloc.take<ST>();
    __shared__ mbarrier bar;
    const coord t{int(blockIdx.y), int(blockIdx.x)};
    if (threadIdx.x == 0) {
        init_mbarrier(bar, 1);
        fence_mbarrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        arrive_expect_bytes(bar, ST::bytes);
        tma::load_async(tile, map, bar, t);
    }
    wait(bar, 0);
    for (int i = threadIdx.x; i < ST::rows * ST::cols; i += blockDim.x) {
        const int r = i / ST::cols, c = i % ST::cols;
        out[size_t(t.r * ST::rows + r) * ld + t.c * ST::cols + c] = tile(r, c);
    }
}

template <shared_tile ST, bool ADD>
__device__ void plain_load_then_store(const CUtensorMap& map, const typename ST::dtype* in, int ld) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    ST& tile = alloc.take<ST>();
    const coord t{int(blockIdx.y), int(blockIdx.x)};
    for (int i = threadIdx.x; i < ST::rows * ST::cols; i += blockDim.x) {
        const int r = i / ST::cols, c = i % ST::cols;
        tile(r, c) = in[size_t(t.r * ST::rows + r) * ld + t.c * ST::cols + c];
    }
    fence_proxy_async();  // plain stores above, async-proxy reads below
    __syncthreads();
    if (threadIdx.x == 0) {
        if constexpr (ADD) tma::store_add_async(map, tile, t);
        else tma::store_async(map, tile, t);
        tma::store_commit();
        tma::store_wait();
    }
}

#define PROBES(name, T, R, C, SWZ)                                                                  \
    extern "C" __global__ void load_##name(const __grid_constant__ CUtensorMap map, T* out, int ld) { \
        load_then_plain_store<st<T, R, C, SWZ>>(map, out, ld);                                      \
    }                                                                                               \
    extern "C" __global__ void store_##name(const __grid_constant__ CUtensorMap map, const T* in, int ld) { \
        plain_load_then_store<st<T, R, C, SWZ>, false>(map, in, ld);                                \
    }                                                                                               \
    extern "C" __global__ void add_##name(const __grid_constant__ CUtensorMap map, const T* in, int ld) { \
        plain_load_then_store<st<T, R, C, SWZ>, true>(map, in, ld);                                 \
    }

PROBES(bf16_64x128_sw128, bf16, 64, 128, swizzle_128B)
PROBES(bf16_64x128_sw64, bf16, 64, 128, swizzle_64B)
PROBES(bf16_64x128_sw32, bf16, 64, 128, swizzle_32B)
PROBES(bf16_64x128_interleave, bf16, 64, 128, interleave)
PROBES(bf16_64x128_none, bf16, 64, 128, row_major_128)
PROBES(bf16_512x64_sw128, bf16, 512, 64, swizzle_128B)
PROBES(f32_64x64_sw128, float, 64, 64, swizzle_128B)
PROBES(f32_32x16_sw64, float, 32, 16, swizzle_64B)
