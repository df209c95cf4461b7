// Probe kernels for the tile-library operations the attention kernels added (tests/test_attention_ops_gpu.py).
// Each kernel is one warp (or one block) exercising one op on data the test draws fresh; the test holds the
// model of what the op must produce.
#include "tk.cuh"

using namespace tk;

// ---- warp mma with shared operands: C (32 x 64) = A (32 x 32) B^T (B: 64 x 32), and D = A (32x32) E (32x64) --
extern "C" __global__ void mma_shared_operands(const bf16* a, const bf16* b, const bf16* e, float* c, float* d) {
    __shared__ st_bf<32, 32> a_s;
    __shared__ st_bf<64, 32> b_s;
    __shared__ st_bf<32, 64> e_s;
    load(a_s, gl<const bf16>(a, 32, 32), {0, 0});
    load(b_s, gl<const bf16>(b, 64, 32), {0, 0});
    load(e_s, gl<const bf16>(e, 32, 64), {0, 0});
    __syncwarp();
    rt_fl<32, 64> acc;
    zero(acc);
    mma_ABt(acc, a_s, b_s, acc);  // both operands from shared memory
    store(gl<float>(c, 32, 64), acc, {0, 0});
    rt_bf<32, 32> a_r;
    load(a_r, a_s);
    zero(acc);
    mma_AB(acc, a_r, e_s, acc);  // A in registers, B from shared memory (ldmatrix.trans)
    store(gl<float>(d, 32, 64), acc, {0, 0});
}

// ---- masks, map_row, warp_any on a 32 x 64 fp32 tile ------------------------------------------------------
extern "C" __global__ void masks(const float* x, float* causal, float* keys, float* mapped, const float* v,
                                 int row0, int col0, int length, int* any_out) {
    rt_fl<32, 64> t;
    load(t, gl<const float>(x, 32, 64), {0, 0});
    rt_fl<32, 64> u = t;
    causal_mask(u, row0, col0);
    store(gl<float>(causal, 32, 64), u, {0, 0});
    u = t;
    mask_keys_from(u, col0, length);
    store(gl<float>(keys, 32, 64), u, {0, 0});
    col_vec<rt_fl<32, 64>> r;
    load(r, v);
    map_row(u, t, r, [](float a, float b) { return a * b - 1.0f; });
    store(gl<float>(mapped, 32, 64), u, {0, 0});
    any_out[0] = warp_any(r, [](float a) { return a > 100.0f; });
    any_out[1] = warp_any(r, [](float a) { return a < 100.0f; });
}

// ---- bounded copies: a 64 x 64 tile of a matrix with `rows` rows, through shared memory and back ------------
extern "C" __global__ void bounded_copy(const bf16* src, bf16* dst, int rows, int tile) {
    __shared__ st_bf<64, 64> s;
    load_async_bounded<4>(s, gl<const bf16>(src, rows, 64), {tile, 0});
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    store_bounded<4>(gl<bf16>(dst, rows, 64), s, {tile, 0});
}

// ---- a register vector stored up to a length -----------------------------------------------------------------
extern "C" __global__ void vector_store_length(const float* v, float* out, int length) {
    col_vec<rt_fl<32, 16>> r;
    load(r, v);
    store(out, r, length);
}

// ---- fast special functions, element-wise ---------------------------------------------------------------------
extern "C" __global__ void fast_math_probe(const float* x, float* e, float* l, float* r, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        e[i] = fast::exp2(x[i]);
        l[i] = fast::log2(fabsf(x[i]) + 1e-3f);
        r[i] = fast::rcp(x[i]);
    }
}

// ---- elect_one: exactly one lane of each warp ------------------------------------------------------------------
extern "C" __global__ void elect_probe(int* count_per_warp) {
    if (warpgroup::elect_one()) atomicAdd(&count_per_warp[threadIdx.x / 32], 1);
}

// ---- turns: G warpgroups take turns; each appends its id to a log while it holds the turn --------------------
template <int G>
__device__ void take_turns(int* log, int rounds) {
    __shared__ int cursor;
    if (threadIdx.x == 0) cursor = 0;
    __syncthreads();
    const int me = warpgroup::groupid();
    using turn = warpgroup::turns<1, G>;
    turn::start(me);
    for (int k = 0; k < rounds; ++k) {
        turn::wait(me);
        if (warpgroup::threadid() == 0) log[atomicAdd(&cursor, 1)] = me;
        __threadfence_block();
        turn::pass(me, k == rounds - 1);
    }
}
extern "C" __global__ void turns2(int* log, int rounds) { take_turns<2>(log, rounds); }
extern "C" __global__ void turns3(int* log, int rounds) { take_turns<3>(log, rounds); }

// ---- rank-4 TMA: load tile {b, h, r, 0} of [B, H, N, 64] bf16 (rows past N: zeros), store it to another ------
extern "C" __global__ void tma_rank4(const __grid_constant__ CUtensorMap in, const __grid_constant__ CUtensorMap out,
                                     bf16* seen, int b, int h, int r) {
    __shared__ st_bf<64, 64> t;
    __shared__ mbarrier bar;
    if (threadIdx.x == 0) {
        init_mbarrier(bar, 1);
        fence_mbarrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        tma::expect(bar, t);
        tma::load_async(t, in, bar, {b, h, r, 0});
    }
    wait(bar, 0);
    for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) seen[i] = t(i / 64, i % 64);  // what landed
    fence_proxy_async();
    __syncthreads();
    if (threadIdx.x == 0) {
        tma::store_async(out, t, {b, h, r, 0});
        tma::store_commit();
        tma::store_wait<0>();
    }
}
