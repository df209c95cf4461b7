// Compile-time proof that st's lane addressing (st::lane / st::lane_offset) gives the same byte as the
// plain swizzled byte_offset for every lane offset and subtile corner the ldmatrix/stmatrix paths use.
// Nothing runs: if any case differed, a static_assert would stop the compile (tests/test_tile_compile.py).
#include "tk.cuh"

using namespace tk;

template <typename ST>
__host__ __device__ constexpr bool lane_addressing_agrees() {
    for (int lr = 0; lr < 16; ++lr)
        for (int lc = 0; lc <= 8; lc += 8)
            for (int r = 0; r + 16 <= ST::rows; r += 8)
                for (int c = 0; c + 16 <= ST::cols; c += 16)
                    if (ST::lane_offset(ST::lane(lr, lc), r, c) != ST::byte_offset(r + lr, c + lc)) return false;
    return true;
}

static_assert(lane_addressing_agrees<st_bf<64, 128>>(), "128B swizzle, two panels");
static_assert(lane_addressing_agrees<st_bf<32, 64>>(), "128B swizzle, one panel");
static_assert(lane_addressing_agrees<st_bf<48, 32>>(), "64B swizzle");
static_assert(lane_addressing_agrees<st_bf<32, 16>>(), "32B swizzle");
static_assert(lane_addressing_agrees<st_hf<64, 96, swizzle_32B>>(), "32B swizzle, six panels");
static_assert(lane_addressing_agrees<st_bf<32, 64, swizzle_none>>(), "no swizzle");
static_assert(lane_addressing_agrees<st_bf<16, 256, swizzle_64B>>(), "64B swizzle, eight panels");
static_assert(!st<bf16, 64, 64, interleave>::lane_addressing, "16-byte panels fall back to addr(r, c)");

extern "C" __global__ void lane_addressing_compiles() {}
