// The CUDA device environment as host C++: what a kernel's source sees when the emulator compiles it.
//
// The emulator compiles a kernel in two steps. Step 1 preprocesses the learner's file and the tile
// library with keyword macros only (shim/pp/tkemu_pp.h: __global__, __shared__ become markers) and
// system headers stubbed out, so that tklab can rewrite inline PTX and __shared__ declarations on
// the expanded text. Step 2 compiles the rewritten text after THIS header (precompiled once): the C++
// standard library, the CUDA types (vector types, __half, __nv_bfloat16) and the CUDA intrinsics.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <new>
#include <numeric>
#include <tuple>
#include <type_traits>
#include <utility>

#include "half_types.h"
#include "runtime.h"
#include "vector_types.h"

namespace cuda {
namespace std = ::std;  // cuda::std::uint32_t, cuda::std::is_same_v ... are the host library's
}

#define __tkemu_global__
#define CUDART_INF_F (__builtin_inff())
#define CUDART_NAN_F (__builtin_nanf(""))
#define CUDART_PI_F 3.141592654f
#define CUDART_L2E_F 1.442695041f
#define CUDART_LN2_F 0.693147181f
#define CUDART_INF (__builtin_inf())
#define CUDART_NAN (__builtin_nan(""))

typedef struct CUtensorMap_st {
    alignas(64) unsigned long long opaque[16];
} CUtensorMap;
#define __cuda_cuda_h__ 1

namespace tkemu {
template <typename T>
inline uint64_t to_bits(const T& v) {
    static_assert(sizeof(T) <= 8, "register operands are at most 64 bits");
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof(T));
    return u;
}
template <typename T>
inline T from_bits(uint64_t u) {
    T v;
    std::memcpy(&v, &u, sizeof(T));
    return v;
}
/// An inline-asm register operand: the value's bits, as PTX sees a 16/32/64-bit register.
template <typename T>
inline uint64_t reg_in(const T& v) {
    if constexpr (std::is_pointer_v<T>) return uint64_t(reinterpret_cast<uintptr_t>(v));
    else if constexpr (std::is_integral_v<T> || std::is_enum_v<T>) return uint64_t(int64_t(v));
    else return to_bits(v);
}
/// Where an inline-asm input operand lives, when it names a variable (``Ref`` is ``decltype`` of the ``auto&&``
/// that bound it: an lvalue reference); nullptr for a value computed on the spot.
template <typename Ref, typename T>
inline void* home_of(T& v) {
    if constexpr (std::is_lvalue_reference_v<Ref>) return const_cast<void*>(static_cast<const void*>(&v));
    else return nullptr;
}
template <typename T>
inline void reg_out(T& dst, uint64_t bits) {
    if constexpr (std::is_pointer_v<T>) dst = reinterpret_cast<T>(uintptr_t(bits));
    else if constexpr (std::is_integral_v<T> || std::is_enum_v<T>) {
        if constexpr (sizeof(T) <= 4) dst = T(uint32_t(bits));
        else dst = T(bits);
    } else dst = from_bits<std::remove_cv_t<T>>(bits);
}
template <typename T>
inline uint64_t reg_f(const T& v) {  // an "f" operand: the float value, whatever type carries it
    if constexpr (std::is_arithmetic_v<T>) return to_bits(float(v));
    else return to_bits(v);
}
template <typename T>
inline uint64_t reg_d(const T& v) {
    if constexpr (std::is_arithmetic_v<T>) return to_bits(double(v));
    else return to_bits(v);
}
template <typename T>
inline void reg_out_f(T& dst, uint64_t bits) {
    if constexpr (std::is_arithmetic_v<T>) dst = T(from_bits<float>(bits));
    else reg_out(dst, bits);
}
template <typename T>
inline void reg_out_d(T& dst, uint64_t bits) {
    if constexpr (std::is_arithmetic_v<T>) dst = T(from_bits<double>(bits));
    else reg_out(dst, bits);
}

/// Where a function-scope `__shared__` variable lives: placed in the block's shared memory the first time a
/// thread of the block reaches the declaration; every thread of the block gets the same object.
template <typename T>
inline const ShapeInfo* shape_of() {
    static const ShapeInfo info = [] {
        ShapeInfo s{int(sizeof(std::remove_all_extents_t<T>)), int(std::rank_v<T>), {0, 0, 0, 0}};
        if constexpr (std::rank_v<T> > 0) s.dims[0] = int(std::extent_v<T, 0>);
        if constexpr (std::rank_v<T> > 1) s.dims[1] = int(std::extent_v<T, 1>);
        if constexpr (std::rank_v<T> > 2) s.dims[2] = int(std::extent_v<T, 2>);
        if constexpr (std::rank_v<T> > 3) s.dims[3] = int(std::extent_v<T, 3>);
        if (!std::is_arithmetic_v<std::remove_all_extents_t<T>>) s.rank = -1;  // tiles, structs: bytes only
        return s;
    }();
    return &info;
}
template <typename S, typename T>
inline S* shared_var(const char* name, const T*) {
    static const char key = 0;
    return static_cast<S*>(shared_static(&key, sizeof(S), alignof(S), name, shape_of<T>()));
}
/// The same for a namespace-scope `__shared__` variable (bound once per OS thread, kept across blocks).
template <typename S, typename T>
inline S* shared_gvar(const char* name, const T*) {
    static const char key = 0;
    return static_cast<S*>(shared_global(&key, sizeof(S), alignof(S), name, shape_of<T>()));
}

/// Calls kernel(args...) with the arguments unpacked from an array of pointers (one per parameter).
template <typename... P, size_t... I>
inline void invoke_impl(void (*f)(P...), void* const* a, std::index_sequence<I...>) {
    f(*static_cast<std::remove_cv_t<std::remove_reference_t<P>>*>(a[I])...);
}
template <typename... P>
inline void invoke(void (*f)(P...), void* const* a) {
    invoke_impl(f, a, std::index_sequence_for<P...>{});
}
/// Parameter sizes and alignments of a kernel, for the Python side to pack arguments.
template <typename... P>
inline const int* signature(void (*)(P...)) {
    static const int sig[] = {int(sizeof...(P)), int(sizeof(std::remove_cv_t<std::remove_reference_t<P>>))...,
                              int(alignof(std::remove_cv_t<std::remove_reference_t<P>>))...,
                              int(std::is_pointer_v<std::remove_cv_t<std::remove_reference_t<P>>>)..., 0};
    return sig;
}

template <typename T>
inline T atomic(T* p, int op, T v, T cmp = T()) {
    return from_bits<T>(atomic_rmw(p, int(sizeof(T)), op, to_bits(v), to_bits(cmp)));
}
}  // namespace tkemu

// ---- synchronisation -------------------------------------------------------------------------------------
inline void __syncthreads() { tkemu::bar_sync(0, 0); }
inline int __syncthreads_count(int p) { return tkemu::bar_red(0, 0, p); }
inline int __syncthreads_and(int p) { return tkemu::bar_red(1, 0, p); }
inline int __syncthreads_or(int p) { return tkemu::bar_red(2, 0, p); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { tkemu::syncwarp(mask); }
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}
inline void __nanosleep(unsigned) { tkemu::yield_now(); }
inline long long clock64() { return tkemu::clock64(); }
#if defined(_LIBCPP_VERSION)  // libc++ (a Mac's) has declared <time.h>'s clock() by now: CUDA's is a macro there
#define clock() tkemu::clock64()
#else
inline long long clock() { return tkemu::clock64(); }
#endif
inline void __trap() { tkemu::trap(); }
inline void __brkpt() { tkemu::trap(); }

// ---- warp-wide -------------------------------------------------------------------------------------------
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int lane, int width = 32) {
    return tkemu::from_bits<T>(tkemu::shfl(mask, tkemu::to_bits(v), 0, lane, width));
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return tkemu::from_bits<T>(tkemu::shfl(mask, tkemu::to_bits(v), 1, int(delta), width));
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return tkemu::from_bits<T>(tkemu::shfl(mask, tkemu::to_bits(v), 2, int(delta), width));
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return tkemu::from_bits<T>(tkemu::shfl(mask, tkemu::to_bits(v), 3, lane_mask, width));
}
inline unsigned __ballot_sync(unsigned mask, int p) { return tkemu::vote(mask, p, 0); }
inline int __any_sync(unsigned mask, int p) { return int(tkemu::vote(mask, p, 1)); }
inline int __all_sync(unsigned mask, int p) { return int(tkemu::vote(mask, p, 2)); }
inline unsigned __activemask() { return tkemu::activemask(); }
template <typename T>
inline unsigned __match_any_sync(unsigned mask, T v) { return tkemu::match_any(mask, tkemu::to_bits(v)); }
template <typename T>
inline unsigned __match_all_sync(unsigned mask, T v, int* pred) { return tkemu::match_all(mask, tkemu::to_bits(v), pred); }
#define TKEMU_REDUCE(name, T, combine)                                                                     \
    inline T name(unsigned mask, T v) {                                                                   \
        T acc = v;                                                                                        \
        for (int o = 16; o >= 1; o /= 2) {                                                                \
            T other = __shfl_xor_sync(mask, acc, o);                                                      \
            acc = combine;                                                                                \
        }                                                                                                 \
        return acc;                                                                                       \
    }
TKEMU_REDUCE(__reduce_add_sync, unsigned, acc + other)
TKEMU_REDUCE(__reduce_add_sync, int, acc + other)
TKEMU_REDUCE(__reduce_min_sync, unsigned, acc < other ? acc : other)
TKEMU_REDUCE(__reduce_min_sync, int, acc < other ? acc : other)
TKEMU_REDUCE(__reduce_max_sync, unsigned, acc > other ? acc : other)
TKEMU_REDUCE(__reduce_max_sync, int, acc > other ? acc : other)
TKEMU_REDUCE(__reduce_and_sync, unsigned, acc & other)
TKEMU_REDUCE(__reduce_or_sync, unsigned, acc | other)
TKEMU_REDUCE(__reduce_xor_sync, unsigned, acc ^ other)
#undef TKEMU_REDUCE

// ---- shared-memory addresses ---------------------------------------------------------------------------------
inline size_t __cvta_generic_to_shared(const void* p) { return tkemu::smem_addr(p); }
inline void* __cvta_shared_to_generic(size_t a) { return tkemu::smem_ptr(a, 0, "__cvta_shared_to_generic"); }
inline unsigned __isShared(const void* p) { return tkemu::is_shared(p); }
inline unsigned __isGlobal(const void* p) { return !tkemu::is_shared(p); }

// ---- atomics -------------------------------------------------------------------------------------------------
#define TKEMU_ATOMIC(name, T, op) \
    inline T name(T* p, T v) { return tkemu::atomic<T>(p, tkemu::op, v); }
TKEMU_ATOMIC(atomicAdd, int, A_ADD)
TKEMU_ATOMIC(atomicAdd, unsigned, A_ADD)
TKEMU_ATOMIC(atomicAdd, unsigned long long, A_ADD)
TKEMU_ATOMIC(atomicAdd, long long, A_ADD)
TKEMU_ATOMIC(atomicAdd, float, A_FADD)
TKEMU_ATOMIC(atomicAdd, double, A_DADD)
TKEMU_ATOMIC(atomicAdd, __half2, A_HADD2)
TKEMU_ATOMIC(atomicAdd, __nv_bfloat162, A_BADD2)
TKEMU_ATOMIC(atomicAdd, __half, A_HADD)
TKEMU_ATOMIC(atomicAdd, __nv_bfloat16, A_BADD)
TKEMU_ATOMIC(atomicSub, int, A_SUB)
TKEMU_ATOMIC(atomicSub, unsigned, A_SUB)
TKEMU_ATOMIC(atomicExch, int, A_EXCH)
TKEMU_ATOMIC(atomicExch, unsigned, A_EXCH)
TKEMU_ATOMIC(atomicExch, unsigned long long, A_EXCH)
TKEMU_ATOMIC(atomicExch, float, A_EXCH)
// CUDA's min/max on the four integer types (signed or unsigned comparison by the type), bitwise on three.
#define TKEMU_ATOMIC_ORDERED(name, signed_op, unsigned_op)                                                \
    TKEMU_ATOMIC(name, int, signed_op) TKEMU_ATOMIC(name, unsigned, unsigned_op)                          \
    TKEMU_ATOMIC(name, long long, signed_op) TKEMU_ATOMIC(name, unsigned long long, unsigned_op)
#define TKEMU_ATOMIC_BITWISE(name, op) \
    TKEMU_ATOMIC(name, int, op) TKEMU_ATOMIC(name, unsigned, op) TKEMU_ATOMIC(name, unsigned long long, op)
TKEMU_ATOMIC_ORDERED(atomicMin, A_MIN_S, A_MIN_U)
TKEMU_ATOMIC_ORDERED(atomicMax, A_MAX_S, A_MAX_U)
TKEMU_ATOMIC(atomicInc, unsigned, A_INC)
TKEMU_ATOMIC(atomicDec, unsigned, A_DEC)
TKEMU_ATOMIC_BITWISE(atomicAnd, A_AND)
TKEMU_ATOMIC_BITWISE(atomicOr, A_OR)
TKEMU_ATOMIC_BITWISE(atomicXor, A_XOR)
#undef TKEMU_ATOMIC_ORDERED
#undef TKEMU_ATOMIC_BITWISE
#undef TKEMU_ATOMIC
inline int atomicCAS(int* p, int cmp, int v) { return tkemu::atomic<int>(p, tkemu::A_CAS, v, cmp); }
inline unsigned atomicCAS(unsigned* p, unsigned cmp, unsigned v) { return tkemu::atomic<unsigned>(p, tkemu::A_CAS, v, cmp); }
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long cmp, unsigned long long v) {
    return tkemu::atomic<unsigned long long>(p, tkemu::A_CAS, v, cmp);
}
inline unsigned short atomicCAS(unsigned short* p, unsigned short cmp, unsigned short v) {
    return tkemu::atomic<unsigned short>(p, tkemu::A_CAS, v, cmp);
}
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd
#define atomicMax_block atomicMax
#define atomicMin_block atomicMin
#define atomicExch_block atomicExch
#define atomicCAS_block atomicCAS

// ---- integer intrinsics -------------------------------------------------------------------------------------
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz(unsigned(x)) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
inline unsigned long long __brevll(unsigned long long x) {
    return (static_cast<unsigned long long>(__brev(unsigned(x))) << 32) | __brev(unsigned(x >> 32));
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = (static_cast<unsigned long long>(y) << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= unsigned((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
    return unsigned((v << (s & 31)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
    return unsigned(v >> (s & 31));
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned s) { return __funnelshift_l(lo, hi, s > 32 ? 32 : s); }
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s) { return __funnelshift_r(lo, hi, s > 32 ? 32 : s); }
inline int __mulhi(int a, int b) { return int((static_cast<long long>(a) * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((static_cast<unsigned long long>(a) * b) >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline int __mul24(int a, int b) { return ((a << 8) >> 8) * ((b << 8) >> 8); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
inline int __hadd(int a, int b) { return int((static_cast<long long>(a) + b) >> 1); }
inline int __rhadd(int a, int b) { return int((static_cast<long long>(a) + b + 1) >> 1); }
inline unsigned __uhadd(unsigned a, unsigned b) { return unsigned((static_cast<unsigned long long>(a) + b) >> 1); }
inline unsigned __sad(int a, int b, unsigned c) { return unsigned(a > b ? a - b : b - a) + c; }
inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return (a > b ? a - b : b - a) + c; }

// min / max as CUDA overloads them for the device (non-templates, so they win over std::min).
#define TKEMU_MINMAX(T)                                                                                    \
    inline T min(T a, T b) { return a < b ? a : b; }                                                     \
    inline T max(T a, T b) { return a > b ? a : b; }
TKEMU_MINMAX(int)
TKEMU_MINMAX(unsigned)
TKEMU_MINMAX(long)
TKEMU_MINMAX(unsigned long)
TKEMU_MINMAX(long long)
TKEMU_MINMAX(unsigned long long)
#undef TKEMU_MINMAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline unsigned min(int a, unsigned b) { return min(unsigned(a), b); }
inline unsigned min(unsigned a, int b) { return min(a, unsigned(b)); }
inline unsigned max(int a, unsigned b) { return max(unsigned(a), b); }
inline unsigned max(unsigned a, int b) { return max(a, unsigned(b)); }
inline float min(float a, double b) { return std::fmin(a, float(b)); }
inline float max(float a, double b) { return std::fmax(a, float(b)); }

// ---- float intrinsics ---------------------------------------------------------------------------------------
inline float __expf(float x) { return std::exp(x); }
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __log10f(float x) { return std::log10(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline void __sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline void sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / std::sqrt(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / std::cbrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x == x ? x : 0.0f)); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fadd_rz(float a, float b) { return a + b; }
inline float __fmul_rz(float a, float b) { return a * b; }
inline float __fmaf_rz(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float exp10f(float x) { return std::pow(10.0f, x); }
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }
inline int __double2hiint(double x) { return int(std::bit_cast<unsigned long long>(x) >> 32); }
inline int __double2loint(double x) { return int(std::bit_cast<unsigned long long>(x)); }
inline double __hiloint2double(int hi, int lo) {
    return std::bit_cast<double>((static_cast<unsigned long long>(unsigned(hi)) << 32) | unsigned(lo));
}
inline int __float2int_rn(float x) { return int(std::nearbyint(x)); }
inline int __float2int_rz(float x) { return int(x); }
inline int __float2int_rd(float x) { return int(std::floor(x)); }
inline int __float2int_ru(float x) { return int(std::ceil(x)); }
inline unsigned __float2uint_rn(float x) { return unsigned(std::nearbyint(x)); }
inline unsigned __float2uint_rz(float x) { return unsigned(x); }
inline long long __float2ll_rn(float x) { return (long long)std::nearbyint(x); }
inline float __int2float_rn(int x) { return float(x); }
inline float __uint2float_rn(unsigned x) { return float(x); }
inline float __double2float_rn(double x) { return float(x); }

// ---- loads and stores with cache hints: plain accesses here --------------------------------------------------
template <typename T> inline T __ldg(const T* p) { return *p; }
template <typename T> inline T __ldcg(const T* p) { return *p; }
template <typename T> inline T __ldca(const T* p) { return *p; }
template <typename T> inline T __ldcs(const T* p) { return *p; }
template <typename T> inline T __ldlu(const T* p) { return *p; }
template <typename T> inline T __ldcv(const T* p) { return *p; }
template <typename T> inline void __stcg(T* p, T v) { *p = v; }
template <typename T> inline void __stcs(T* p, T v) { *p = v; }
template <typename T> inline void __stwb(T* p, T v) { *p = v; }
template <typename T> inline void __stwt(T* p, T v) { *p = v; }
