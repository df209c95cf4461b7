// __half and __nv_bfloat16 (and their pairs) for host C++: the 16-bit storage formats the tensor cores
// take, with the conversions and arithmetic of cuda_fp16.h / cuda_bf16.h. Arithmetic is done in float
// and rounded once, round-to-nearest-even, which is what the device's conversions do.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "vector_types.h"

namespace tkemu {

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

/// float -> bf16 bits, round to nearest even (NaN stays a quiet NaN).
inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}
inline uint16_t f32_to_bf16_rz(float f) { return uint16_t(f32_bits(f) >> 16); }
inline float bf16_to_f32(uint16_t h) { return bits_f32(uint32_t(h) << 16); }

/// float -> IEEE half bits, round to nearest even, with subnormals, overflow to infinity.
inline uint16_t f32_to_f16(float f) {
    const uint32_t u = f32_bits(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
    if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: infinity
    if (a < 0x38800000u) {                                 // below the smallest normal half: subnormal
        const float scaled = bits_f32(a) * 16777216.0f;    // x * 2^24 = the subnormal's integer mantissa
        return uint16_t(sign | uint32_t(std::nearbyint(scaled)));
    }
    uint32_t m = a - 0x38000000u;  // rebias exponent 127 -> 15
    m += 0xfffu + ((m >> 13) & 1u);
    return uint16_t(sign | (m >> 13));
}
inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    if (e == 0) {
        const float v = float(m) / 16777216.0f;
        return sign ? -v : v;
    }
    if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
    return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

}  // namespace tkemu

struct __half_raw { unsigned short x; };
struct __nv_bfloat16_raw { unsigned short x; };

// CUDA's two 16-bit float types are distinct types (kernels overload on them), alike but for their rounding: one
// definition, instantiated for each, keeps them alike.
#define TKEMU_H16_TYPE(T, RAW, TO, FROM)                                                                  \
    struct alignas(2) T {                                                                                 \
        unsigned short __x;                                                                               \
        T() = default;                                                                                    \
        constexpr T(RAW r) : __x(r.x) {}                                                                  \
        T(float f) : __x(tkemu::TO(f)) {}                                                                 \
        T(double f) : __x(tkemu::TO(float(f))) {}                                                         \
        T(int i) : __x(tkemu::TO(float(i))) {}                                                            \
        T(unsigned i) : __x(tkemu::TO(float(i))) {}                                                       \
        T(long long i) : __x(tkemu::TO(float(i))) {}                                                      \
        T(unsigned long long i) : __x(tkemu::TO(float(i))) {}                                             \
        T(short i) : __x(tkemu::TO(float(i))) {}                                                          \
        T(unsigned short i) : __x(tkemu::TO(float(i))) {}                                                 \
        operator float() const { return tkemu::FROM(__x); }                                               \
        operator RAW() const { return {__x}; }                                                            \
        T& operator=(float f) { __x = tkemu::TO(f); return *this; }                                       \
    };
TKEMU_H16_TYPE(__half, __half_raw, f32_to_f16, f16_to_f32)
TKEMU_H16_TYPE(__nv_bfloat16, __nv_bfloat16_raw, f32_to_bf16, bf16_to_f32)
#undef TKEMU_H16_TYPE

#define TKEMU_H16X2_TYPE(T2, T)                                                                           \
    struct alignas(4) T2 {                                                                                \
        T x, y;                                                                                           \
        T2() = default;                                                                                   \
        constexpr T2(T a, T b) : x(a), y(b) {}                                                            \
    };
TKEMU_H16X2_TYPE(__half2, __half)
TKEMU_H16X2_TYPE(__nv_bfloat162, __nv_bfloat16)
#undef TKEMU_H16X2_TYPE
typedef __half half;
typedef __half2 half2;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

// ---- arithmetic and comparisons, in float, rounded once -----------------------------------------------
#define TKEMU_H16_OPS(T)                                                                                  \
    inline T operator+(T a, T b) { return T(float(a) + float(b)); }                                      \
    inline T operator-(T a, T b) { return T(float(a) - float(b)); }                                      \
    inline T operator*(T a, T b) { return T(float(a) * float(b)); }                                      \
    inline T operator/(T a, T b) { return T(float(a) / float(b)); }                                      \
    inline T operator-(T a) { T r = a; r.__x ^= 0x8000u; return r; }                                      \
    inline T operator+(T a) { return a; }                                                                  \
    inline T& operator+=(T& a, T b) { return a = a + b; }                                                 \
    inline T& operator-=(T& a, T b) { return a = a - b; }                                                 \
    inline T& operator*=(T& a, T b) { return a = a * b; }                                                 \
    inline T& operator/=(T& a, T b) { return a = a / b; }                                                 \
    inline bool operator==(T a, T b) { return float(a) == float(b); }                                     \
    inline bool operator!=(T a, T b) { return float(a) != float(b); }                                     \
    inline bool operator<(T a, T b) { return float(a) < float(b); }                                       \
    inline bool operator>(T a, T b) { return float(a) > float(b); }                                       \
    inline bool operator<=(T a, T b) { return float(a) <= float(b); }                                     \
    inline bool operator>=(T a, T b) { return float(a) >= float(b); }
TKEMU_H16_OPS(__half)
TKEMU_H16_OPS(__nv_bfloat16)
#undef TKEMU_H16_OPS

#define TKEMU_H16X2_OPS(T2, T)                                                                            \
    inline T2 operator+(T2 a, T2 b) { return T2(a.x + b.x, a.y + b.y); }                                  \
    inline T2 operator-(T2 a, T2 b) { return T2(a.x - b.x, a.y - b.y); }                                  \
    inline T2 operator*(T2 a, T2 b) { return T2(a.x * b.x, a.y * b.y); }                                  \
    inline T2 operator/(T2 a, T2 b) { return T2(a.x / b.x, a.y / b.y); }                                  \
    inline T2& operator+=(T2& a, T2 b) { return a = a + b; }                                              \
    inline T2& operator-=(T2& a, T2 b) { return a = a - b; }                                              \
    inline T2& operator*=(T2& a, T2 b) { return a = a * b; }                                              \
    inline T2 operator-(T2 a) { return T2(-a.x, -a.y); }                                                  \
    inline bool operator==(T2 a, T2 b) { return a.x == b.x && a.y == b.y; }                               \
    inline bool operator!=(T2 a, T2 b) { return !(a == b); }
TKEMU_H16X2_OPS(__half2, __half)
TKEMU_H16X2_OPS(__nv_bfloat162, __nv_bfloat16)
#undef TKEMU_H16X2_OPS

// ---- conversions (cuda_bf16.h / cuda_fp16.h names) -------------------------------------------------------
// One definition for both types; the names differ (cuda_bf16.h's and cuda_fp16.h's), so each is an argument.
#define TKEMU_H16_CONVERSIONS(T, T2, RAW, TO_FLOAT, FROM_FLOAT, FROM_FLOAT_RN, FROM_FLOAT_X2_RN, FROM_FLOATS_X2_RN, \
                              FROM_FLOAT2_RN, TO_FLOAT2, HALVES, BROADCAST, LOW, HIGH, FROM_USHORT, TO_USHORT)      \
    inline float TO_FLOAT(T a) { return float(a); }                                                      \
    inline T FROM_FLOAT(float a) { return T(a); }                                                         \
    inline T FROM_FLOAT_RN(float a) { return T(a); }                                                      \
    inline T2 FROM_FLOAT_X2_RN(float a) { return {T(a), T(a)}; }                                          \
    inline T2 FROM_FLOATS_X2_RN(float a, float b) { return {T(a), T(b)}; }                                \
    inline T2 FROM_FLOAT2_RN(float2 a) { return {T(a.x), T(a.y)}; }                                       \
    inline float2 TO_FLOAT2(T2 a) { return {float(a.x), float(a.y)}; }                                    \
    inline T2 HALVES(T a, T b) { return {a, b}; }                                                         \
    inline T2 BROADCAST(T a) { return {a, a}; }                                                           \
    inline T LOW(T2 a) { return a.x; }                                                                    \
    inline T HIGH(T2 a) { return a.y; }                                                                   \
    inline float __low2float(T2 a) { return float(a.x); }                                                 \
    inline float __high2float(T2 a) { return float(a.y); }                                                \
    inline T FROM_USHORT(unsigned short u) { return RAW{u}; }                                             \
    inline unsigned short TO_USHORT(T h) { return h.__x; }
TKEMU_H16_CONVERSIONS(__nv_bfloat16, __nv_bfloat162, __nv_bfloat16_raw, __bfloat162float, __float2bfloat16,
                      __float2bfloat16_rn, __float2bfloat162_rn, __floats2bfloat162_rn, __float22bfloat162_rn,
                      __bfloat1622float2, __halves2bfloat162, __bfloat162bfloat162, __low2bfloat16, __high2bfloat16,
                      __ushort_as_bfloat16, __bfloat16_as_ushort)
TKEMU_H16_CONVERSIONS(__half, __half2, __half_raw, __half2float, __float2half, __float2half_rn, __float2half2_rn,
                      __floats2half2_rn, __float22half2_rn, __half22float2, __halves2half2, __half2half2, __low2half,
                      __high2half, __ushort_as_half, __half_as_ushort)
#undef TKEMU_H16_CONVERSIONS
inline __nv_bfloat16 __float2bfloat16_rz(float a) { return __nv_bfloat16_raw{tkemu::f32_to_bf16_rz(a)}; }

// ---- arithmetic (cuda_fp16.h / cuda_bf16.h: the same names for both types) -------------------------------
#define TKEMU_H16_MATH(T, T2)                                                                             \
    inline T __hmax(T a, T b) { return float(a) > float(b) ? a : b; }                                     \
    inline T __hmin(T a, T b) { return float(a) < float(b) ? a : b; }                                     \
    inline T __hadd(T a, T b) { return a + b; }                                                           \
    inline T __hsub(T a, T b) { return a - b; }                                                           \
    inline T __hmul(T a, T b) { return a * b; }                                                           \
    inline T __hfma(T a, T b, T c) { return T(std::fma(float(a), float(b), float(c))); }                  \
    inline T2 __hadd2(T2 a, T2 b) { return a + b; }                                                       \
    inline T2 __hsub2(T2 a, T2 b) { return a - b; }                                                       \
    inline T2 __hmul2(T2 a, T2 b) { return a * b; }                                                       \
    inline T2 __hfma2(T2 a, T2 b, T2 c) { return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)}; }        \
    inline T2 __hmax2(T2 a, T2 b) { return {__hmax(a.x, b.x), __hmax(a.y, b.y)}; }                        \
    inline T2 __hmin2(T2 a, T2 b) { return {__hmin(a.x, b.x), __hmin(a.y, b.y)}; }                        \
    inline T hexp(T a) { return T(std::exp(float(a))); }                                                  \
    inline T hexp2(T a) { return T(std::exp2(float(a))); }
TKEMU_H16_MATH(__nv_bfloat16, __nv_bfloat162)
TKEMU_H16_MATH(__half, __half2)
#undef TKEMU_H16_MATH
