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

struct alignas(2) __half {
    unsigned short __x;
    __half() = default;
    constexpr __half(__half_raw r) : __x(r.x) {}
    __half(float f) : __x(tkemu::f32_to_f16(f)) {}
    __half(double f) : __x(tkemu::f32_to_f16(float(f))) {}
    __half(int i) : __x(tkemu::f32_to_f16(float(i))) {}
    __half(unsigned i) : __x(tkemu::f32_to_f16(float(i))) {}
    __half(long long i) : __x(tkemu::f32_to_f16(float(i))) {}
    __half(unsigned long long i) : __x(tkemu::f32_to_f16(float(i))) {}
    __half(short i) : __x(tkemu::f32_to_f16(float(i))) {}
    __half(unsigned short i) : __x(tkemu::f32_to_f16(float(i))) {}
    operator float() const { return tkemu::f16_to_f32(__x); }
    operator __half_raw() const { return {__x}; }
    __half& operator=(float f) { __x = tkemu::f32_to_f16(f); return *this; }
};

struct alignas(2) __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    constexpr __nv_bfloat16(__nv_bfloat16_raw r) : __x(r.x) {}
    __nv_bfloat16(float f) : __x(tkemu::f32_to_bf16(f)) {}
    __nv_bfloat16(double f) : __x(tkemu::f32_to_bf16(float(f))) {}
    __nv_bfloat16(int i) : __x(tkemu::f32_to_bf16(float(i))) {}
    __nv_bfloat16(unsigned i) : __x(tkemu::f32_to_bf16(float(i))) {}
    __nv_bfloat16(long long i) : __x(tkemu::f32_to_bf16(float(i))) {}
    __nv_bfloat16(unsigned long long i) : __x(tkemu::f32_to_bf16(float(i))) {}
    __nv_bfloat16(short i) : __x(tkemu::f32_to_bf16(float(i))) {}
    __nv_bfloat16(unsigned short i) : __x(tkemu::f32_to_bf16(float(i))) {}
    operator float() const { return tkemu::bf16_to_f32(__x); }
    operator __nv_bfloat16_raw() const { return {__x}; }
    __nv_bfloat16& operator=(float f) { __x = tkemu::f32_to_bf16(f); return *this; }
};

struct alignas(4) __half2 {
    __half x, y;
    __half2() = default;
    constexpr __half2(__half a, __half b) : x(a), y(b) {}
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    constexpr __nv_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) : x(a), y(b) {}
};
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
inline float __bfloat162float(__nv_bfloat16 a) { return float(a); }
inline __nv_bfloat16 __float2bfloat16(float a) { return __nv_bfloat16(a); }
inline __nv_bfloat16 __float2bfloat16_rn(float a) { return __nv_bfloat16(a); }
inline __nv_bfloat16 __float2bfloat16_rz(float a) { return __nv_bfloat16_raw{tkemu::f32_to_bf16_rz(a)}; }
inline __nv_bfloat162 __float2bfloat162_rn(float a) { return {__nv_bfloat16(a), __nv_bfloat16(a)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 a) { return {__nv_bfloat16(a.x), __nv_bfloat16(a.y)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 a) { return {float(a.x), float(a.y)}; }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return {a, b}; }
inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return {a, a}; }
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 a) { return a.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 a) { return a.y; }
inline float __low2float(__nv_bfloat162 a) { return float(a.x); }
inline float __high2float(__nv_bfloat162 a) { return float(a.y); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16_raw{u}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __hmax(__nv_bfloat16 a, __nv_bfloat16 b) { return float(a) > float(b) ? a : b; }
inline __nv_bfloat16 __hmin(__nv_bfloat16 a, __nv_bfloat16 b) { return float(a) < float(b) ? a : b; }
inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return a + b; }
inline __nv_bfloat16 __hsub(__nv_bfloat16 a, __nv_bfloat16 b) { return a - b; }
inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return a * b; }
inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    return __nv_bfloat16(std::fma(float(a), float(b), float(c)));
}
inline __nv_bfloat162 __hadd2(__nv_bfloat162 a, __nv_bfloat162 b) { return a + b; }
inline __nv_bfloat162 __hsub2(__nv_bfloat162 a, __nv_bfloat162 b) { return a - b; }
inline __nv_bfloat162 __hmul2(__nv_bfloat162 a, __nv_bfloat162 b) { return a * b; }
inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
    return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)};
}
inline __nv_bfloat162 __hmax2(__nv_bfloat162 a, __nv_bfloat162 b) { return {__hmax(a.x, b.x), __hmax(a.y, b.y)}; }
inline __nv_bfloat162 __hmin2(__nv_bfloat162 a, __nv_bfloat162 b) { return {__hmin(a.x, b.x), __hmin(a.y, b.y)}; }

inline float __half2float(__half a) { return float(a); }
inline __half __float2half(float a) { return __half(a); }
inline __half __float2half_rn(float a) { return __half(a); }
inline __half2 __float2half2_rn(float a) { return {__half(a), __half(a)}; }
inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }
inline __half2 __float22half2_rn(float2 a) { return {__half(a.x), __half(a.y)}; }
inline float2 __half22float2(__half2 a) { return {float(a.x), float(a.y)}; }
inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
inline __half2 __half2half2(__half a) { return {a, a}; }
inline __half __low2half(__half2 a) { return a.x; }
inline __half __high2half(__half2 a) { return a.y; }
inline float __low2float(__half2 a) { return float(a.x); }
inline float __high2float(__half2 a) { return float(a.y); }
inline __half __ushort_as_half(unsigned short u) { return __half_raw{u}; }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __hmax(__half a, __half b) { return float(a) > float(b) ? a : b; }
inline __half __hmin(__half a, __half b) { return float(a) < float(b) ? a : b; }
inline __half __hadd(__half a, __half b) { return a + b; }
inline __half __hsub(__half a, __half b) { return a - b; }
inline __half __hmul(__half a, __half b) { return a * b; }
inline __half __hfma(__half a, __half b, __half c) { return __half(std::fma(float(a), float(b), float(c))); }
inline __half2 __hadd2(__half2 a, __half2 b) { return a + b; }
inline __half2 __hsub2(__half2 a, __half2 b) { return a - b; }
inline __half2 __hmul2(__half2 a, __half2 b) { return a * b; }
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)}; }
inline __half2 __hmax2(__half2 a, __half2 b) { return {__hmax(a.x, b.x), __hmax(a.y, b.y)}; }
inline __half2 __hmin2(__half2 a, __half2 b) { return {__hmin(a.x, b.x), __hmin(a.y, b.y)}; }
inline __half hexp(__half a) { return __half(std::exp(float(a))); }
inline __half hexp2(__half a) { return __half(std::exp2(float(a))); }
inline __nv_bfloat16 hexp(__nv_bfloat16 a) { return __nv_bfloat16(std::exp(float(a))); }
inline __nv_bfloat16 hexp2(__nv_bfloat16 a) { return __nv_bfloat16(std::exp2(float(a))); }
