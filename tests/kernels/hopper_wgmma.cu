// wgmma probes: one warpgroup multiplies A (64 x K) by B into a 64 x N fp32 tile, for each operand
// arrangement, operand source (shared / registers) and shared layout. Operands are copied from global
// memory with plain stores through st's address function (so only the descriptors are under test),
// the product goes out through warpgroup::store. Matrices arrive as stored: A is 64 x K (or K x 64 for
// At), B is K x N (or N x K for Bt), all row-major.
#include "tk.cuh"

using namespace tk;

template <shared_tile ST>
__device__ void fill(ST& dst, const typename ST::dtype* src) {
    for (int i = threadIdx.x; i < ST::rows * ST::cols; i += blockDim.x) dst(i / ST::cols, i % ST::cols) = src[i];
}

/// This warp's 16 rows of a row-major 64 x K matrix, straight into the register-tile layout.
template <element16 T, int K>
__device__ void fill(rt<T, 16, K>& dst, const T* src) {
    for (int j = 0; j < K / 16; ++j)
        for (int k = 0; k < 4; ++k) {
            const rc p = fragment_pos<row>(laneid(), k, 0);
            const T* e = src + (16 * warpgroup::warp() + p.r) * K + 16 * j + p.c;
            dst.tiles[0][j].data[k] = make_pair<T>(e[0], e[1]);
        }
}

enum arrangement { AB, ABt, AtB, AtBt };

template <arrangement OP, int N, shared_tile SA, shared_tile SB>
__device__ void product_ss(const typename SA::dtype* a, const typename SB::dtype* b, float* d_out) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    SA& sa = alloc.take<SA>();
    SB& sb = alloc.take<SB>();
    fill(sa, a);
    fill(sb, b);
    fence_proxy_async();  // plain stores above are read by the tensor core (async proxy) below
    __syncthreads();
    rt<float, 16, N> d;
    if constexpr (OP == AB) warpgroup::mm_AB(d, sa, sb);
    if constexpr (OP == ABt) warpgroup::mm_ABt(d, sa, sb);
    if constexpr (OP == AtB) warpgroup::mm_AtB(d, sa, sb);
    if constexpr (OP == AtBt) warpgroup::mm_AtBt(d, sa, sb);
    warpgroup::mma_async_wait();
    warpgroup::store(gl<float>(d_out, 64, N), d, {0, 0});
}

template <arrangement OP, int N, int K, shared_tile SB>
__device__ void product_rs(const typename SB::dtype* a, const typename SB::dtype* b, float* d_out) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    SB& sb = alloc.take<SB>();
    fill(sb, b);
    fence_proxy_async();
    __syncthreads();
    rt<typename SB::dtype, 16, K> ra;
    fill(ra, a);
    rt<float, 16, N> d;
    fill(d, 1.0f);  // mma (accumulating) on top of ones: checks that the old accumulator is kept
    if constexpr (OP == AB) warpgroup::mma_AB(d, ra, sb);
    if constexpr (OP == ABt) warpgroup::mma_ABt(d, ra, sb);
    warpgroup::mma_async_wait();
    warpgroup::store(gl<float>(d_out, 64, N), d, {0, 0});
}

// name, op, T, N, K, A's swizzle, B's swizzle. A is 64 x K (K x 64 for At), B is K x N (N x K for Bt).
#define SS(name, OP, T, N, K, SWA, SWB)                                                                  \
    extern "C" __global__ void __launch_bounds__(128) name(const T* a, const T* b, float* d) {           \
        using SA = tk::conditional_t<OP == AtB || OP == AtBt, st<T, K, 64, SWA>, st<T, 64, K, SWA>>; \
        using SB = tk::conditional_t<OP == ABt || OP == AtBt, st<T, N, K, SWB>, st<T, K, N, SWB>>;   \
        product_ss<OP, N, SA, SB>(a, b, d);                                                              \
    }
#define RS(name, OP, T, N, K, SWB)                                                                       \
    extern "C" __global__ void __launch_bounds__(128) name(const T* a, const T* b, float* d) {           \
        using SB = tk::conditional_t<OP == ABt, st<T, N, K, SWB>, st<T, K, N, SWB>>;               \
        product_rs<OP, N, K, SB>(a, b, d);                                                               \
    }

// every N the GEMM and attention use, both B arrangements, 128B swizzle
SS(ss_AB_n64, AB, bf16, 64, 64, swizzle_128B, swizzle_128B)
SS(ss_AB_n128, AB, bf16, 128, 64, swizzle_128B, swizzle_128B)
SS(ss_AB_n256, AB, bf16, 256, 64, swizzle_128B, swizzle_128B)
SS(ss_ABt_n64, ABt, bf16, 64, 64, swizzle_128B, swizzle_128B)
SS(ss_ABt_n128, ABt, bf16, 128, 64, swizzle_128B, swizzle_128B)
SS(ss_ABt_n256, ABt, bf16, 256, 64, swizzle_128B, swizzle_128B)
SS(ss_AtB_n128, AtB, bf16, 128, 64, swizzle_128B, swizzle_128B)
SS(ss_AtBt_n128, AtBt, bf16, 128, 64, swizzle_128B, swizzle_128B)
// small and odd widths; K spanning two 128B panels
SS(ss_ABt_n16, ABt, bf16, 16, 64, swizzle_128B, swizzle_128B)
SS(ss_AB_n96, AB, bf16, 96, 64, swizzle_128B, swizzle_64B)
SS(ss_AB_n128_k128, AB, bf16, 128, 128, swizzle_128B, swizzle_128B)
SS(ss_ABt_n128_k128, ABt, bf16, 128, 128, swizzle_128B, swizzle_128B)
// every shared layout
SS(ss_AB_n128_sw64, AB, bf16, 128, 64, swizzle_64B, swizzle_64B)
SS(ss_ABt_n128_sw64, ABt, bf16, 128, 64, swizzle_64B, swizzle_64B)
SS(ss_AB_n128_sw32, AB, bf16, 128, 64, swizzle_32B, swizzle_32B)
SS(ss_ABt_n128_sw32, ABt, bf16, 128, 64, swizzle_32B, swizzle_32B)
SS(ss_AB_n128_il, AB, bf16, 128, 64, interleave, interleave)
SS(ss_ABt_n128_il, ABt, bf16, 128, 64, interleave, interleave)
SS(ss_AtB_n64_il, AtB, bf16, 64, 32, interleave, interleave)
// fp16
SS(ss_ABt_n64_f16, ABt, half, 64, 64, swizzle_128B, swizzle_128B)
// A from registers
RS(rs_AB_n64, AB, bf16, 64, 64, swizzle_128B)
RS(rs_AB_n128, AB, bf16, 128, 64, swizzle_128B)
RS(rs_AB_n256, AB, bf16, 256, 64, swizzle_128B)
RS(rs_ABt_n128, ABt, bf16, 128, 64, swizzle_128B)
RS(rs_ABt_n64_k128, ABt, bf16, 64, 128, swizzle_128B)
