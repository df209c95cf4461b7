// Test kernels for the tk tile library (tests/test_tile_ops_gpu.py runs them, test_tile_compile.py
// compiles them for sm_80 and sm_90a). One warp per tile unless a kernel says otherwise; inputs are
// float (converted on load) unless the path under test copies raw bytes (cp.async, ldmatrix).
#include "tk.cuh"
using namespace tk;

// ---- fragment layout probes: every lane writes an id (subtile, lane, k, p) into its elements ---------------
template <typename T, int R, int C, typename L>
__device__ void probe(float* out) {
    rt<T, R, C, L> t;
    const int lane = laneid();
#pragma unroll
    for (int i = 0; i < t.height; i++)
#pragma unroll
        for (int j = 0; j < t.width; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float id = float((((i * t.width + j) * 32 + lane) * 4 + k) * 2);
                t.tiles[i][j].data[k] = make_pair<T>(id, id + 1.0f);
            }
    store(gl<float>(out, R, C), t, {0, 0});
}
extern "C" __global__ void probe_row_f32_32x48(float* out) { probe<float, 32, 48, row>(out); }
extern "C" __global__ void probe_col_f32_32x48(float* out) { probe<float, 32, 48, col>(out); }
extern "C" __global__ void probe_row_bf16_16x16(float* out) { probe<bf16, 16, 16, row>(out); }
extern "C" __global__ void probe_col_bf16_16x16(float* out) { probe<bf16, 16, 16, col>(out); }

// ---- vector layouts: each lane dumps its raw slots (lane_g: 2 per block, lane_t: 2 pairs per block) --------
template <typename VL, int N>
__device__ void vec_probe(float* out, const float* in) {
    rv<float, N, VL> v;
    load(v, in);
    constexpr int per_lane = N / 16 * (tk::is_same_v<VL, lane_g> ? 2 : 4);
    float* mine = out + laneid() * per_lane;
#pragma unroll
    for (int b = 0; b < N / 16; b++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if constexpr (tk::is_same_v<VL, lane_g>) mine[2 * b + h] = v.data[b][h];
            else { mine[4 * b + 2 * h] = v.data[b][h].x; mine[4 * b + 2 * h + 1] = v.data[b][h].y; }
        }
}
extern "C" __global__ void vec_probe_g_32(float* out, const float* in) { vec_probe<lane_g, 32>(out, in); }
extern "C" __global__ void vec_probe_t_32(float* out, const float* in) { vec_probe<lane_t, 32>(out, in); }

// ---- global <-> register, one tile per block at coord (blockIdx.y, blockIdx.x) ------------------------------
template <typename T, int R, int C, typename L, typename U>
__device__ void g2r(U* out, const U* in, int rows, int cols) {
    rt<T, R, C, L> t;
    load(t, gl<const U>(in, rows, cols), {int(blockIdx.y), int(blockIdx.x)});
    store(gl<U>(out, rows, cols), t, {int(blockIdx.y), int(blockIdx.x)});
}
#define G2R(name, T, R, C, L, U) \
    extern "C" __global__ void name(U* out, const U* in, int rows, int cols) { g2r<T, R, C, L, U>(out, in, rows, cols); }
G2R(g2r_f32_row_16x32, float, 16, 32, row, float)
G2R(g2r_f32_col_32x16, float, 32, 16, col, float)
G2R(g2r_bf16_row_32x32, bf16, 32, 32, row, float)
G2R(g2r_bf16_col_16x48, bf16, 16, 48, col, float)
G2R(g2r_half_row_16x16, half, 16, 16, row, float)
G2R(g2r_bf16raw_col_32x16, bf16, 32, 16, col, bf16)

// ---- global -> shared (cp.async or plain) -> registers (ldmatrix) -> global, and registers -> shared
//      (stmatrix / plain) -> global. W warps share the copies; warps take the register sub-blocks in turn. ---
template <typename T, int SR, int SC, typename S, typename L, int RR, int RC, int W>
__device__ void s2r(T* out_reg, T* out_smem, const T* in, int rows, int cols, int async) {
    __shared__ st<T, SR, SC, S> a, b;
    const coord me{int(blockIdx.y), int(blockIdx.x)};
    const gl<const T> src(in, rows, cols);
    if (async) {
        load_async<W>(a, src, me);
        cp_async_commit();
        cp_async_wait<0>();
    } else {
        load<W>(a, src, me);
    }
    __syncthreads();
    constexpr int subs_c = SC / RC, subs = SR / RR * subs_c;
    for (int s = warpid(); s < subs; s += W) {
        const coord sub{s / subs_c, s % subs_c};
        rt<T, RR, RC, L> r;
        load(r, a, sub);
        store(gl<T>(out_reg, rows, cols), r, {me.r * (SR / RR) + sub.r, me.c * subs_c + sub.c});
        store(b, r, sub);
    }
    __syncthreads();
    store<W>(gl<T>(out_smem, rows, cols), b, me);
}
#define S2R(name, T, SR, SC, S, L, RR, RC, W)                                                          \
    extern "C" __global__ void name(T* out_reg, T* out_smem, const T* in, int rows, int cols, int async) { \
        s2r<T, SR, SC, S, L, RR, RC, W>(out_reg, out_smem, in, rows, cols, async);                     \
    }
S2R(s2r_bf16_64x64_none_row_16x64_w1, bf16, 64, 64, swizzle_none, row, 16, 64, 1)
S2R(s2r_bf16_64x64_128B_row_32x32_w2, bf16, 64, 64, swizzle_128B, row, 32, 32, 2)
S2R(s2r_bf16_64x64_128B_col_32x16_w2, bf16, 64, 64, swizzle_128B, col, 32, 16, 2)
S2R(s2r_bf16_32x128_128B_col_16x32_w4, bf16, 32, 128, swizzle_128B, col, 16, 32, 4)
S2R(s2r_bf16_64x32_64B_row_64x16_w1, bf16, 64, 32, swizzle_64B, row, 64, 16, 1)
S2R(s2r_bf16_32x16_32B_col_16x16_w1, bf16, 32, 16, swizzle_32B, col, 16, 16, 1)
S2R(s2r_bf16_32x64_none_col_32x32_w2, bf16, 32, 64, swizzle_none, col, 32, 32, 2)
S2R(s2r_half_64x64_128B_col_16x64_w2, half, 64, 64, swizzle_128B, col, 16, 64, 2)
S2R(s2r_f32_32x64_128B_row_16x32_w2, float, 32, 64, swizzle_128B, row, 16, 32, 2)
S2R(s2r_f32_32x32_128B_col_16x16_w1, float, 32, 32, swizzle_128B, col, 16, 16, 1)
S2R(s2r_f32_32x16_64B_row_32x16_w1, float, 32, 16, swizzle_64B, row, 32, 16, 1)

// ---- the swizzle/address function itself: out[r * C + c] = byte offset of (r, c) -------------------------
template <typename ST>
__device__ void swz_probe(int* out) {
    for (int i = threadIdx.x; i < ST::rows * ST::cols; i += blockDim.x) out[i] = int(ST::byte_offset(i / ST::cols, i % ST::cols));
}
#define SWZ(name, T, R, C, S) extern "C" __global__ void name(int* out) { swz_probe<st<T, R, C, S>>(out); }
SWZ(swz_bf16_64x64_128B, bf16, 64, 64, swizzle_128B)
SWZ(swz_bf16_32x128_128B, bf16, 32, 128, swizzle_128B)
SWZ(swz_bf16_64x32_64B, bf16, 64, 32, swizzle_64B)
SWZ(swz_bf16_32x16_32B, bf16, 32, 16, swizzle_32B)
SWZ(swz_f32_16x64_128B, float, 16, 64, swizzle_128B)
SWZ(swz_bf16_16x64_none, bf16, 16, 64, swizzle_none)
// default_swizzle picks the widest pattern the row allows: report (rows x cols -> swizzle bytes)
extern "C" __global__ void swz_defaults(int* out) {
    out[0] = st_bf<16, 64>::swz::bytes;   // 128-byte rows
    out[1] = st_bf<16, 32>::swz::bytes;   // 64
    out[2] = st_bf<16, 16>::swz::bytes;   // 32
    out[3] = st_bf<16, 256>::swz::bytes;  // 512 -> 128 (4 panels)
    out[4] = st_fl<16, 16>::swz::bytes;   // 64
    out[5] = st_bf<16, 48>::swz::bytes;   // 96 -> 32
    out[6] = st_bf<16, 256>::panels;
}

// ---- shared allocation: addresses of what the allocator hands out, and of statically declared tiles ------
extern "C" __global__ void alloc_probe(int* out) {
    extern __shared__ char smem[];
    shared_allocator alloc(smem);
    auto& v = alloc.take<sv_fl<16>>();
    auto& t1 = alloc.take<st_bf<64, 64>>();
    auto& t2 = alloc.take<st_bf<16, 16, swizzle_none>>();
    auto& t3 = alloc.take<st_bf<32, 64>, 2>();
    auto& t4 = alloc.take<st_fl<16, 32>>();
    if (threadIdx.x == 0) {
        out[0] = int(smem_u32(smem));
        out[1] = int(smem_u32(&v));
        out[2] = int(smem_u32(&t1));
        out[3] = int(smem_u32(&t2));
        out[4] = int(smem_u32(&t3[0]));
        out[5] = int(smem_u32(&t3[1]));
        out[6] = int(smem_u32(&t4));
        out[7] = int(smem_u32(alloc.ptr));
        out[8] = dynamic_shared_bytes<sv_fl<16>, st_bf<64, 64>, st_bf<16, 16, swizzle_none>, st_bf<32, 64>,
                                      st_bf<32, 64>, st_fl<16, 32>>();
    }
}
extern "C" __global__ void static_align_probe(int* out) {
    __shared__ float pad[3];
    __shared__ st_bf<16, 64> t;
    __shared__ st_bf<16, 16, swizzle_none> u;
    pad[threadIdx.x % 3] = 0.0f;
    t.data[threadIdx.x] = bf16(pad[0]);
    u.data[threadIdx.x] = bf16(pad[1]);
    if (threadIdx.x == 0) {
        out[0] = int(smem_u32(&t) % 1024);
        out[1] = int(smem_u32(&u) % 16);
    }
}

// ---- element-wise maps (op chosen at run time), on tiles and vectors ------------------------------------------
template <typename X>
__device__ void apply_map(X& d, const X& a, const X& b, int op, float s) {
    switch (op) {
        case 0: exp(d, a); break;
        case 1: exp2(d, a); break;
        case 2: add(d, a, b); break;
        case 3: sub(d, a, b); break;
        case 4: mul(d, a, b); break;
        case 5: div(d, a, b); break;
        case 6: max(d, a, b); break;
        case 7: min(d, a, b); break;
        case 8: add(d, a, s); break;
        case 9: sub(d, a, s); break;
        case 10: mul(d, a, s); break;
        case 11: div(d, a, s); break;
        case 12: max(d, a, s); break;
        case 13: min(d, a, s); break;
        case 14: neg(d, a); break;
        case 15: abs(d, a); break;
        case 16: fill(d, s); break;
        case 17: zero(d); break;
        case 18: map(d, a, [](float x) { return x * x + 1.0f; }); break;
        default: d = a;
    }
}
template <typename T, int R, int C, typename L>
__device__ void map_tile(float* out, const float* a, const float* b, int op, float s) {
    rt<T, R, C, L> x, y, d;
    load(x, gl<const float>(a, R, C), {0, 0});
    load(y, gl<const float>(b, R, C), {0, 0});
    apply_map(d, x, y, op, s);
    store(gl<float>(out, R, C), d, {0, 0});
}
#define MAP(name, T, R, C, L) \
    extern "C" __global__ void name(float* out, const float* a, const float* b, int op, float s) { map_tile<T, R, C, L>(out, a, b, op, s); }
MAP(map_f32_row_32x32, float, 32, 32, row)
MAP(map_f32_col_16x48, float, 16, 48, col)
MAP(map_bf16_row_16x32, bf16, 16, 32, row)
MAP(map_bf16_col_32x16, bf16, 32, 16, col)
MAP(map_half_row_16x16, half, 16, 16, row)
template <typename VL, int N>
__device__ void map_vec(float* out, const float* a, const float* b, int op, float s) {
    rv<float, N, VL> x, y, d;
    load(x, a);
    load(y, b);
    apply_map(d, x, y, op, s);
    store(out, d);
}
extern "C" __global__ void vmap_g_32(float* out, const float* a, const float* b, int op, float s) { map_vec<lane_g, 32>(out, a, b, op, s); }
extern "C" __global__ void vmap_t_48(float* out, const float* a, const float* b, int op, float s) { map_vec<lane_t, 48>(out, a, b, op, s); }

// ---- type conversion: float -> T -> float (register copies), and a bf16 store from a float tile ---------
template <typename T, int R, int C, typename L>
__device__ void convert_rt(float* out, bf16* out_bf, const float* in) {
    rt_fl<R, C, L> x, back;
    rt<T, R, C, L> y;
    load(x, gl<const float>(in, R, C), {0, 0});
    copy(y, x);
    copy(back, y);
    store(gl<float>(out, R, C), back, {0, 0});
    store(gl<bf16>(out_bf, R, C), x, {0, 0});
}
extern "C" __global__ void convert_bf16_row_32x32(float* out, bf16* out_bf, const float* in) { convert_rt<bf16, 32, 32, row>(out, out_bf, in); }
extern "C" __global__ void convert_half_col_16x32(float* out, bf16* out_bf, const float* in) { convert_rt<half, 16, 32, col>(out, out_bf, in); }

// ---- row / column broadcasts: ops 0-3 = add/sub/mul/div_row (vr, length R), 4-7 the _col forms (vc) -------
template <typename T, int R, int C, typename L>
__device__ void bcast(float* out, const float* a, const float* vr, const float* vc, int op) {
    using tile = rt<T, R, C, L>;
    tile x, d;
    typename tile::col_vec r;
    typename tile::row_vec c;
    load(x, gl<const float>(a, R, C), {0, 0});
    load(r, vr);
    load(c, vc);
    switch (op) {
        case 0: add_row(d, x, r); break;
        case 1: sub_row(d, x, r); break;
        case 2: mul_row(d, x, r); break;
        case 3: div_row(d, x, r); break;
        case 4: add_col(d, x, c); break;
        case 5: sub_col(d, x, c); break;
        case 6: mul_col(d, x, c); break;
        default: div_col(d, x, c); break;
    }
    store(gl<float>(out, R, C), d, {0, 0});
}
#define BCAST(name, T, R, C, L) \
    extern "C" __global__ void name(float* out, const float* a, const float* vr, const float* vc, int op) { bcast<T, R, C, L>(out, a, vr, vc, op); }
BCAST(bcast_f32_row_32x48, float, 32, 48, row)
BCAST(bcast_f32_col_48x32, float, 48, 32, col)
BCAST(bcast_bf16_row_16x32, bf16, 16, 32, row)
BCAST(bcast_bf16_col_32x16, bf16, 32, 16, col)

// ---- reductions into float vectors: op 0 max, 1 sum, 2 min, 3 max with prev, 4 sum with prev -------------
template <typename T, int R, int C, typename L>
__device__ void reduce_tile(float* out_r, float* out_c, const float* a, const float* prev_r, const float* prev_c, int op) {
    using tile = rt<T, R, C, L>;
    tile x;
    rv<float, R, typename tile::col_vec::layout> r, pr;
    rv<float, C, typename tile::row_vec::layout> c, pc;
    load(x, gl<const float>(a, R, C), {0, 0});
    load(pr, prev_r);
    load(pc, prev_c);
    switch (op) {
        case 0: row_max(r, x); col_max(c, x); break;
        case 1: row_sum(r, x); col_sum(c, x); break;
        case 2: row_min(r, x); col_min(c, x); break;
        case 3: row_max(pr, x, pr); col_max(pc, x, pc); r = pr; c = pc; break;
        default: row_sum(pr, x, pr); col_sum(pc, x, pc); r = pr; c = pc; break;
    }
    store(out_r, r);
    store(out_c, c);
}
#define REDUCE(name, T, R, C, L)                                                                              \
    extern "C" __global__ void name(float* out_r, float* out_c, const float* a, const float* prev_r,         \
                                    const float* prev_c, int op) { reduce_tile<T, R, C, L>(out_r, out_c, a, prev_r, prev_c, op); }
REDUCE(reduce_f32_row_32x64, float, 32, 64, row)
REDUCE(reduce_f32_col_64x32, float, 64, 32, col)
REDUCE(reduce_f32_row_16x16, float, 16, 16, row)
REDUCE(reduce_bf16_row_48x16, bf16, 48, 16, row)
REDUCE(reduce_bf16_col_16x48, bf16, 16, 48, col)

// ---- tensor-core products: d = a b + c (b as K x N col tile) and d = a b^T + c (b as N x K row tile) ------
template <typename T, int M, int N, int K, bool BT>
__device__ void mma_test(float* d, const float* a, const float* b, const float* c, int in_place) {
    rt<T, M, K, row> x;
    tk::conditional_t<BT, rt<T, N, K, row>, rt<T, K, N, col>> y;
    rt_fl<M, N> acc, out;
    load(x, gl<const float>(a, M, K), {0, 0});
    if constexpr (BT) load(y, gl<const float>(b, N, K), {0, 0});
    else load(y, gl<const float>(b, K, N), {0, 0});
    load(acc, gl<const float>(c, M, N), {0, 0});
    if (in_place) {
        if constexpr (BT) mma_ABt(acc, x, y, acc);
        else mma_AB(acc, x, y, acc);
        store(gl<float>(d, M, N), acc, {0, 0});
    } else {
        if constexpr (BT) mma_ABt(out, x, y, acc);
        else mma_AB(out, x, y, acc);
        store(gl<float>(d, M, N), out, {0, 0});
    }
}
#define MMA(name, T, M, N, K, BT) \
    extern "C" __global__ void name(float* d, const float* a, const float* b, const float* c, int in_place) { mma_test<T, M, N, K, BT>(d, a, b, c, in_place); }
MMA(mma_AB_bf16_16x16x16, bf16, 16, 16, 16, false)
MMA(mma_AB_bf16_32x64x48, bf16, 32, 64, 48, false)
MMA(mma_AB_half_64x32x32, half, 64, 32, 32, false)
MMA(mma_ABt_bf16_16x32x64, bf16, 16, 32, 64, true)
MMA(mma_ABt_half_32x16x16, half, 32, 16, 16, true)

// ---- layout changes: swap_layout (out == in) and the two transposes (out == in^T) --------------------------
template <typename T, int R, int C, typename L>
__device__ void layout_test(float* swapped, float* tr_same, float* tr_free, const float* in) {
    rt<T, R, C, L> x;
    rt<T, R, C, transpose_layout<L>> s;
    rt<T, C, R, L> t1;
    rt<T, C, R, transpose_layout<L>> t2;
    load(x, gl<const float>(in, R, C), {0, 0});
    swap_layout(s, x);
    transpose(t1, x);
    transpose(t2, x);
    store(gl<float>(swapped, R, C), s, {0, 0});
    store(gl<float>(tr_same, C, R), t1, {0, 0});
    store(gl<float>(tr_free, C, R), t2, {0, 0});
}
#define LAYOUT(name, T, R, C, L) \
    extern "C" __global__ void name(float* s, float* t1, float* t2, const float* in) { layout_test<T, R, C, L>(s, t1, t2, in); }
LAYOUT(layout_bf16_row_32x16, bf16, 32, 16, row)
LAYOUT(layout_bf16_col_16x48, bf16, 16, 48, col)
LAYOUT(layout_f32_row_16x32, float, 16, 32, row)
LAYOUT(layout_f32_col_32x32, float, 32, 32, col)
LAYOUT(layout_half_row_16x16, half, 16, 16, row)

// ---- register vectors <-> shared vectors ------------------------------------------------------------------
extern "C" __global__ void sv_roundtrip_t_64(float* out, const float* in) {
    __shared__ sv_fl<64> s;
    __shared__ sv_bf<64> s2;
    rv_fl<64, lane_t> v;
    rv_bf<64, lane_g> w;
    load(v, in);
    store(s, v);
    __syncwarp();
    load(w, s);     // float shared -> bf16 register vector of the other layout
    store(s2, w);
    __syncwarp();
    load(v, s2);
    store(out, v);
}
