// Shared tiles <-> register tiles: ldmatrix (and stmatrix on sm_90) for 16-bit types.
//
// ldmatrix.x4 loads four 8x8 matrices of 16-bit values at once. Lane l names the address of one
// 16-byte row: row l%8 of matrix l/8. Back comes, in register m of lane (g, t), row g / columns 2t, 2t+1
// of matrix m -- the fragment layout, quadrant by quadrant. So we point matrix m at quadrant m of the
// subtile (m&1: row half, m>>1: column half) and the four registers are exactly pairs [0..3] of a row
// subtile. With .trans each 8x8 matrix arrives transposed: pointing matrix m at quadrant (m>>1, m&1)
// fills a col subtile. 8 lanes read 8 rows of 16 bytes per step; with a swizzled tile those 8 chunks sit
// in 8 different bank groups, so a step is one conflict-free wavefront.
//
// An optional coord picks a sub-block of the shared tile, in units of the register tile's size:
// load(a, a_smem, {warp_row, k}) reads rows [warp_row*R, +R), columns [k*C, +C).
// fp32 tiles (no ldmatrix for 32-bit) are read and written element-pair by element-pair.
#pragma once

#include "../../types/types.cuh"
#include "global_register.cuh"

namespace tk {

namespace detail {
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// stmatrix (the store twin of ldmatrix) exists from sm_90 on; store() only calls these there.
__device__ inline void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 ::"r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
#endif
}
__device__ inline void stmatrix_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                 ::"r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
#endif
}

/// The row (inside a subtile) whose 16-byte segment lane gives to ldmatrix/stmatrix, and its column.
template <rt_layout L>
__device__ inline rc matrix_row_of_lane(int lane) {
    const int m = lane / 8, w = lane % 8;  // matrix m, its row w
    if constexpr (tk::is_same_v<L, row>) return {8 * (m & 1) + w, 8 * (m >> 1)};
    else return {8 * (m >> 1) + w, 8 * (m & 1)};
}

/// Address of this lane's ldmatrix/stmatrix row for the subtile at (r, c), given the lane's offset m in
/// it: through st's lane addressing (the lane's part hoisted out of loops) where the layout allows.
template <typename ST>
__device__ inline uint32_t lane_row_addr(const ST& t, rc m, int r, int c) {
    if constexpr (ST::lane_addressing) return t.addr(ST::lane(m.r, m.c), r, c);
    else return t.addr(r + m.r, c + m.c);
}

/// The 16x16 subtile of a 16-bit shared tile whose first element is (r, c), in layout L: one
/// ldmatrix.x4 (.trans for col). LaneMap: which layout's lane-to-row map points the four matrices
/// (L itself: the registers arrive in tile order).
template <rt_layout L, rt_layout LaneMap = L, element16 T, int SR, int SC, typename S>
__device__ inline rt_base<T, L> load_subtile(const st<T, SR, SC, S>& src, int r, int c) {
    const rc m = matrix_row_of_lane<LaneMap>(laneid());
    uint32_t reg[4];
    if constexpr (tk::is_same_v<L, row>) ldmatrix_x4(reg, lane_row_addr(src, m, r, c));
    else ldmatrix_x4_trans(reg, lane_row_addr(src, m, r, c));
    rt_base<T, L> out;
#pragma unroll
    for (int k = 0; k < 4; k++) as_u32<T>(out.data[k]) = reg[k];
    return out;
}

/// The same subtile as an mma B operand: its four registers in the order the mma instruction takes them,
/// [0] [2] (output columns 0..7, k 0..7 and 8..15) then [1] [3] (columns 8..15). mma.m16n8k16 wants each
/// pair in two CONSECUTIVE registers; loading in tile order would cost two register moves per mma.
/// Pointing ldmatrix's matrices 1 and 2 at each other's quadrants (the other layout's lane-to-row map)
/// makes the instruction deliver them in mma order for free.
template <rt_layout L, element16 T, int SR, int SC, typename S>
__device__ inline rt_base<T, L> load_subtile_mma_b(const st<T, SR, SC, S>& src, int r, int c) {
    return load_subtile<L, transpose_layout<L>>(src, r, c);
}
}  // namespace detail

/// dst = the sub-block t (in units of dst's size) of src.
template <element T, int R, int C, rt_layout L, int SR, int SC, typename S>
__device__ inline void load(rt<T, R, C, L>& dst, const st<T, SR, SC, S>& src, coord t = {0, 0}) {
    static_assert(SR % R == 0 && SC % C == 0, "the register tile must tile the shared tile");
    const int r0 = t.r * R, c0 = t.c * C;
    if constexpr (sizeof(T) == 2) {
#pragma unroll
        for (int i = 0; i < R / TILE; i++)
#pragma unroll
            for (int j = 0; j < C / TILE; j++) dst.tiles[i][j] = detail::load_subtile<L>(src, r0 + TILE * i, c0 + TILE * j);
    } else {
        for_each_pair(dst, [&](float2& x, rc at, rc e0, rc e1) {
            const int r = r0 + at.r, c = c0 + at.c;
            if constexpr (tk::is_same_v<L, row>)  // neighbours share a 16-byte chunk
                x = *reinterpret_cast<const float2*>(&src(r + e0.r, c + e0.c));
            else
                x = make_float2(src(r + e0.r, c + e0.c), src(r + e1.r, c + e1.c));
        });
    }
}

/// The sub-block t (in units of src's size) of dst = src. stmatrix on sm_90, plain stores before.
template <element T, int R, int C, rt_layout L, int SR, int SC, typename S>
__device__ inline void store(st<T, SR, SC, S>& dst, const rt<T, R, C, L>& src, coord t = {0, 0}) {
    static_assert(SR % R == 0 && SC % C == 0, "the register tile must tile the shared tile");
    const int r0 = t.r * R, c0 = t.c * C;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr bool use_stmatrix = sizeof(T) == 2;
#else
    constexpr bool use_stmatrix = false;
#endif
    if constexpr (use_stmatrix) {
        const rc m = detail::matrix_row_of_lane<L>(laneid());
#pragma unroll
        for (int i = 0; i < R / TILE; i++) {
#pragma unroll
            for (int j = 0; j < C / TILE; j++) {
                uint32_t r[4];
#pragma unroll
                for (int k = 0; k < 4; k++) r[k] = as_u32<T>(src.tiles[i][j].data[k]);
                const uint32_t addr = detail::lane_row_addr(dst, m, r0 + TILE * i, c0 + TILE * j);
                if constexpr (tk::is_same_v<L, row>) detail::stmatrix_x4(addr, r);
                else detail::stmatrix_x4_trans(addr, r);
            }
        }
    } else {
        for_each_pair(src, [&](const pair_t<T>& pair, rc at, rc e0, rc e1) {
            const int r = r0 + at.r, c = c0 + at.c;
            if constexpr (tk::is_same_v<L, row>) {
                *reinterpret_cast<pair_t<T>*>(&dst(r + e0.r, c + e0.c)) = pair;
            } else {
                const float2 x = to_float2(pair);
                dst(r + e0.r, c + e0.c) = from_float<T>(x.x);
                dst(r + e1.r, c + e1.c) = from_float<T>(x.y);
            }
        });
    }
}

/// Register vector <- shared vector, and back (one lane writes each entry).
template <element T, int N, rv_layout VL, element U>
__device__ inline void load(rv<T, N, VL>& dst, const sv<U, N>& src) { load(dst, src.data); }
template <element U, element T, int N, rv_layout VL>
__device__ inline void store(sv<U, N>& dst, const rv<T, N, VL>& src) { store(dst.data, src); }

}  // namespace tk
