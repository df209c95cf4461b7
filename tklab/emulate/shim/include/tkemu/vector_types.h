// CUDA's built-in vector types (float2, uint4, dim3 ...) for host C++, with the device alignments, so a
// kernel's reinterpret_casts (a float4 load from a float array) mean the same bytes as on the GPU.
#pragma once

#include <cstdint>

#define TKEMU_VEC2(T, N, A) struct alignas(A) N##2 { T x, y; };
#define TKEMU_VEC3(T, N) struct N##3 { T x, y, z; };
#define TKEMU_VEC4(T, N, A) struct alignas(A) N##4 { T x, y, z, w; };
#define TKEMU_VEC1(T, N) struct N##1 { T x; };
#define TKEMU_VECS(T, N, A2, A4) TKEMU_VEC1(T, N) TKEMU_VEC2(T, N, A2) TKEMU_VEC3(T, N) TKEMU_VEC4(T, N, A4)

TKEMU_VECS(signed char, char, 2, 4)
TKEMU_VECS(unsigned char, uchar, 2, 4)
TKEMU_VECS(short, short, 4, 8)
TKEMU_VECS(unsigned short, ushort, 4, 8)
TKEMU_VECS(int, int, 8, 16)
TKEMU_VECS(unsigned int, uint, 8, 16)
TKEMU_VECS(long long, longlong, 16, 16)
TKEMU_VECS(unsigned long long, ulonglong, 16, 16)
TKEMU_VECS(float, float, 8, 16)
TKEMU_VECS(double, double, 16, 16)
TKEMU_VECS(long, long, 16, 16)
TKEMU_VECS(unsigned long, ulong, 16, 16)

#undef TKEMU_VEC1
#undef TKEMU_VEC2
#undef TKEMU_VEC3
#undef TKEMU_VEC4
#undef TKEMU_VECS

struct dim3 {
    unsigned int x = 1, y = 1, z = 1;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return {x, y, z}; }
};

#define TKEMU_MAKE2(N, T) inline constexpr N##2 make_##N##2(T a, T b) { return {a, b}; }
#define TKEMU_MAKE3(N, T) inline constexpr N##3 make_##N##3(T a, T b, T c) { return {a, b, c}; }
#define TKEMU_MAKE4(N, T) inline constexpr N##4 make_##N##4(T a, T b, T c, T d) { return {a, b, c, d}; }
#define TKEMU_MAKE1(N, T) inline constexpr N##1 make_##N##1(T a) { return {a}; }
#define TKEMU_MAKES(N, T) TKEMU_MAKE1(N, T) TKEMU_MAKE2(N, T) TKEMU_MAKE3(N, T) TKEMU_MAKE4(N, T)
TKEMU_MAKES(char, signed char)
TKEMU_MAKES(uchar, unsigned char)
TKEMU_MAKES(short, short)
TKEMU_MAKES(ushort, unsigned short)
TKEMU_MAKES(int, int)
TKEMU_MAKES(uint, unsigned int)
TKEMU_MAKES(longlong, long long)
TKEMU_MAKES(ulonglong, unsigned long long)
TKEMU_MAKES(float, float)
TKEMU_MAKES(double, double)
#undef TKEMU_MAKE1
#undef TKEMU_MAKE2
#undef TKEMU_MAKE3
#undef TKEMU_MAKE4
#undef TKEMU_MAKES
