// Shared tiles: an R x C matrix in shared memory, addressed through a swizzle policy.
//
// Layout. With no swizzle the tile is plain row-major. With a swizzle of S bytes, a row may not be
// wider than S (that is how TMA boxes and wgmma descriptors describe swizzled memory), so the tile is
// cut into column PANELS of S bytes each (S/sizeof(T) columns): panel 0 holds columns [0, S/sizeof(T))
// of all R rows, then panel 1, ... Inside a panel, row r starts at r*S bytes and swizzle.cuh's XOR
// moves its 16-byte chunks. Example: st<bf16, 64, 128> is two 64x64 panels of 128-byte rows, 128B swizzle.
//
// Storage must be aligned to swz::alignment (1024 bytes when swizzled); the type carries the alignas, so
// a static __shared__ declaration is aligned by the compiler and shared_allocator aligns dynamic memory.
#pragma once

#include "../../common/common.cuh"
#include "swizzle.cuh"

namespace tk {

template <element T, int R, int C, typename Swz = default_swizzle<T, C>>
struct alignas(Swz::alignment) st {
    static_assert(R % TILE == 0 && C % TILE == 0, "shared tile sides must be multiples of 16");
    using dtype = T;
    using swz = Swz;
    static constexpr int rows = R, cols = C;
    static constexpr int panel_cols = Swz::bytes ? Swz::bytes / int(sizeof(T)) : C;
    static constexpr int panels = C / panel_cols;
    static_assert(C % panel_cols == 0, "a swizzled tile's width must be a multiple of the swizzle span");
    static constexpr int bytes = R * C * int(sizeof(T));

    T data[R * C];

    /// Byte offset of element (r, c) from the start of the tile: panel, then row, then swizzle.
    __host__ __device__ static constexpr uint32_t byte_offset(int r, int c) {
        const int linear = (c / panel_cols) * (R * panel_cols) + r * panel_cols + c % panel_cols;
        return Swz::apply(uint32_t(linear) * uint32_t(sizeof(T)));
    }
    /// Element index of (r, c) in data[].
    __host__ __device__ static constexpr int idx(int r, int c) { return int(byte_offset(r, c) / sizeof(T)); }

    __device__ T& operator()(int r, int c) { return data[idx(r, c)]; }
    __device__ const T& operator()(int r, int c) const { return data[idx(r, c)]; }
    /// Shared-space address of (r, c): what ldmatrix / cp.async take.
    __device__ uint32_t addr(int r, int c) const { return smem_u32(data) + byte_offset(r, c); }

    // ---- the same address with each lane's part computed once (ldmatrix / stmatrix patterns) ----------
    // A lane that always reads at an offset (lr, lc) from the corner (r, c) of one subtile after another
    // (lr < 16, lc = 0 or 8; r a multiple of 8, c of 16) sees the same swizzle XOR in every subtile: it
    // depends on the row's position modulo 8 only. So the lane's row offset and its swizzled 16-byte
    // chunk are computed once (lane()), and each subtile's address is an add and an XOR (addr(lp, r, c)).
    static constexpr int row_bytes = panel_cols * int(sizeof(T));  // bytes from one row of a panel to the next
    static constexpr bool lane_addressing = panel_cols >= 16;       // lc = 8 stays inside the panel
    struct lane_part {
        uint32_t row_off, chunk;
    };
    __host__ __device__ static constexpr lane_part lane(int lr, int lc) {
        const uint32_t x = Swz::bytes ? (uint32_t(lr * row_bytes) >> 7) & (Swz::bytes / 16 - 1) : 0;
        return {uint32_t(lr * row_bytes), uint32_t(lc * int(sizeof(T)) / 16) ^ x};
    }
    /// byte_offset(r + lr, c + lc) for lp = lane(lr, lc), under the conditions above.
    __host__ __device__ static constexpr uint32_t lane_offset(lane_part lp, int r, int c) {
        static_assert(lane_addressing, "lane addressing needs panels at least 16 elements wide");
        const uint32_t chunk = uint32_t((c % panel_cols) * int(sizeof(T)) / 16) ^ lp.chunk;
        return uint32_t((c / panel_cols) * R * row_bytes + r * row_bytes) + lp.row_off + (chunk << 4);
    }
    __device__ uint32_t addr(lane_part lp, int r, int c) const { return smem_u32(data) + lane_offset(lp, r, c); }
};

template <int R, int C, typename S = default_swizzle<bf16, C>> using st_bf = st<bf16, R, C, S>;
template <int R, int C, typename S = default_swizzle<half, C>> using st_hf = st<half, R, C, S>;
template <int R, int C, typename S = default_swizzle<float, C>> using st_fl = st<float, R, C, S>;

template <typename X> inline constexpr bool is_st = false;
template <element T, int R, int C, typename S> inline constexpr bool is_st<st<T, R, C, S>> = true;
template <typename X> concept shared_tile = is_st<tk::remove_cvref_t<X>>;

}  // namespace tk
