// wgmma.mma_async, the Hopper tensor-core instruction, for every width N = 16, 32, ..., 256.
//
// One instruction multiplies a 64 x 16 A by a 16 x N B into a 64 x N fp32 accumulator, issued by the
// 128 threads of a warpgroup together. B always comes from shared memory, through a 64-bit matrix
// descriptor (descriptor.cuh); A comes from shared memory (descriptor: "SS") or from registers ("RS",
// four 32-bit registers per thread in the mma.m16n8k16 A-fragment layout). The accumulator is spread
// over the 4 warps, 16 rows each; one warp's share is exactly our rt<float, 16, N> (layout.cuh): for
// its 16x16 subtile j the instruction's registers 8j..8j+7 are the tile's pairs [0], [1], [2], [3].
//
// Inline PTX needs every accumulator register named in the asm statement, numbered %0, %1, ...: the
// tables below list them once, and TK_WG_INSTR stamps out one specialisation per N. Operands after the
// accumulators (descriptors, A registers, flags) get the next numbers, passed to the macro as i0..i6.
// Flags: scale_d = 0 computes D = A*B (ignores the old accumulator), 1 computes D += A*B; TA / TB = 1
// say A / B are stored MN-major ("transposed"), 0 that they are K-major.
#pragma once

#include "../types/register/rt.cuh"

namespace tk::wgmma {

/// Accumulator register I (0 .. N/2-1) of a warp's 16 x N fp32 tile, in the instruction's order.
template <int I, int N>
__device__ inline float& acc(rt<float, 16, N>& d) {
    auto& pair = d.tiles[0][I / 8].data[(I % 8) / 2];
    if constexpr (I % 2 == 0) return pair.x;
    else return pair.y;
}

template <element T, int N> struct instr;  // instr<T, N>::ss<TA, TB>(...) and ::rs<TB>(...)

// clang-format off
// ---- the accumulator operands, %0 .. %(N/2 - 1), and the C++ registers bound to them ----------------
#define TK_WG_ACC_16 "%0, %1, %2, %3, %4, %5, %6, %7"
#define TK_WG_ACC_32 TK_WG_ACC_16 ", " "%8, %9, %10, %11, %12, %13, %14, %15"
#define TK_WG_ACC_48 TK_WG_ACC_32 ", " "%16, %17, %18, %19, %20, %21, %22, %23"
#define TK_WG_ACC_64 TK_WG_ACC_48 ", " "%24, %25, %26, %27, %28, %29, %30, %31"
#define TK_WG_ACC_80 TK_WG_ACC_64 ", " "%32, %33, %34, %35, %36, %37, %38, %39"
#define TK_WG_ACC_96 TK_WG_ACC_80 ", " "%40, %41, %42, %43, %44, %45, %46, %47"
#define TK_WG_ACC_112 TK_WG_ACC_96 ", " "%48, %49, %50, %51, %52, %53, %54, %55"
#define TK_WG_ACC_128 TK_WG_ACC_112 ", " "%56, %57, %58, %59, %60, %61, %62, %63"
#define TK_WG_ACC_144 TK_WG_ACC_128 ", " "%64, %65, %66, %67, %68, %69, %70, %71"
#define TK_WG_ACC_160 TK_WG_ACC_144 ", " "%72, %73, %74, %75, %76, %77, %78, %79"
#define TK_WG_ACC_176 TK_WG_ACC_160 ", " "%80, %81, %82, %83, %84, %85, %86, %87"
#define TK_WG_ACC_192 TK_WG_ACC_176 ", " "%88, %89, %90, %91, %92, %93, %94, %95"
#define TK_WG_ACC_208 TK_WG_ACC_192 ", " "%96, %97, %98, %99, %100, %101, %102, %103"
#define TK_WG_ACC_224 TK_WG_ACC_208 ", " "%104, %105, %106, %107, %108, %109, %110, %111"
#define TK_WG_ACC_240 TK_WG_ACC_224 ", " "%112, %113, %114, %115, %116, %117, %118, %119"
#define TK_WG_ACC_256 TK_WG_ACC_240 ", " "%120, %121, %122, %123, %124, %125, %126, %127"
#define TK_WG_F8(i) "+f"(acc<i + 0>(d)), "+f"(acc<i + 1>(d)), "+f"(acc<i + 2>(d)), "+f"(acc<i + 3>(d)), \
                    "+f"(acc<i + 4>(d)), "+f"(acc<i + 5>(d)), "+f"(acc<i + 6>(d)), "+f"(acc<i + 7>(d))
#define TK_WG_OUT_16 TK_WG_F8(0)
#define TK_WG_OUT_32 TK_WG_OUT_16, TK_WG_F8(8)
#define TK_WG_OUT_48 TK_WG_OUT_32, TK_WG_F8(16)
#define TK_WG_OUT_64 TK_WG_OUT_48, TK_WG_F8(24)
#define TK_WG_OUT_80 TK_WG_OUT_64, TK_WG_F8(32)
#define TK_WG_OUT_96 TK_WG_OUT_80, TK_WG_F8(40)
#define TK_WG_OUT_112 TK_WG_OUT_96, TK_WG_F8(48)
#define TK_WG_OUT_128 TK_WG_OUT_112, TK_WG_F8(56)
#define TK_WG_OUT_144 TK_WG_OUT_128, TK_WG_F8(64)
#define TK_WG_OUT_160 TK_WG_OUT_144, TK_WG_F8(72)
#define TK_WG_OUT_176 TK_WG_OUT_160, TK_WG_F8(80)
#define TK_WG_OUT_192 TK_WG_OUT_176, TK_WG_F8(88)
#define TK_WG_OUT_208 TK_WG_OUT_192, TK_WG_F8(96)
#define TK_WG_OUT_224 TK_WG_OUT_208, TK_WG_F8(104)
#define TK_WG_OUT_240 TK_WG_OUT_224, TK_WG_F8(112)
#define TK_WG_OUT_256 TK_WG_OUT_240, TK_WG_F8(120)

#define TK_WG_SS(N, TY, i0, i1, i2, i3, i4)                                                              \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" #i2 ", 0;\n"                                     \
                 " wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" TK_WG_ACC_##N "},"     \
                 " %" #i0 ", %" #i1 ", p, 1, 1, %" #i3 ", %" #i4 ";\n}\n"                                \
                 : TK_WG_OUT_##N : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB) : "memory")
#define TK_WG_RS(N, TY, i0, i1, i2, i3, i4, i5, i6)                                                      \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" #i5 ", 0;\n"                                     \
                 " wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" TK_WG_ACC_##N "},"     \
                 " {%" #i0 ", %" #i1 ", %" #i2 ", %" #i3 "}, %" #i4 ", p, 1, 1, %" #i6 ";\n}\n"          \
                 : TK_WG_OUT_##N : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), \
                   "n"(TB) : "memory")

#define TK_WG_INSTR(N, i0, i1, i2, i3, i4, i5, i6)                                                       \
    template <element16 T> struct instr<T, N> {                                                          \
        template <int TA, int TB>                                                                        \
        __device__ static void ss(rt<float, 16, N>& d, uint64_t desc_a, uint64_t desc_b, int scale_d) {  \
            if constexpr (tk::is_same_v<T, bf16>) TK_WG_SS(N, "bf16", i0, i1, i2, i3, i4);       \
            else TK_WG_SS(N, "f16", i0, i1, i2, i3, i4);                                                 \
        }                                                                                                \
        template <int TB>                                                                                \
        __device__ static void rs(rt<float, 16, N>& d, const uint32_t (&a)[4], uint64_t desc_b, int scale_d) { \
            if constexpr (tk::is_same_v<T, bf16>) TK_WG_RS(N, "bf16", i0, i1, i2, i3, i4, i5, i6); \
            else TK_WG_RS(N, "f16", i0, i1, i2, i3, i4, i5, i6);                                         \
        }                                                                                                \
    };

TK_WG_INSTR(16, 8, 9, 10, 11, 12, 13, 14)
TK_WG_INSTR(32, 16, 17, 18, 19, 20, 21, 22)
TK_WG_INSTR(48, 24, 25, 26, 27, 28, 29, 30)
TK_WG_INSTR(64, 32, 33, 34, 35, 36, 37, 38)
TK_WG_INSTR(80, 40, 41, 42, 43, 44, 45, 46)
TK_WG_INSTR(96, 48, 49, 50, 51, 52, 53, 54)
TK_WG_INSTR(112, 56, 57, 58, 59, 60, 61, 62)
TK_WG_INSTR(128, 64, 65, 66, 67, 68, 69, 70)
TK_WG_INSTR(144, 72, 73, 74, 75, 76, 77, 78)
TK_WG_INSTR(160, 80, 81, 82, 83, 84, 85, 86)
TK_WG_INSTR(176, 88, 89, 90, 91, 92, 93, 94)
TK_WG_INSTR(192, 96, 97, 98, 99, 100, 101, 102)
TK_WG_INSTR(208, 104, 105, 106, 107, 108, 109, 110)
TK_WG_INSTR(224, 112, 113, 114, 115, 116, 117, 118)
TK_WG_INSTR(240, 120, 121, 122, 123, 124, 125, 126)
TK_WG_INSTR(256, 128, 129, 130, 131, 132, 133, 134)

#undef TK_WG_INSTR
#undef TK_WG_RS
#undef TK_WG_SS
// clang-format on

// ---- ordering: the instruction is asynchronous ------------------------------------------------------
/// Before the first wgmma of a batch: order earlier register writes (accumulator, A) before it.
__device__ inline void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
/// Close the batch of wgmmas issued since the last commit into one group.
__device__ inline void commit_group() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/// Wait until at most N committed groups are still running; then their accumulators may be read and
/// their shared-memory operands overwritten.
template <int N = 0>
__device__ inline void wait_group() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/// Pin every register of a tile at this point of the program.
///
/// Why: the compiler sees a wgmma asm statement as writing the accumulator at ISSUE, not when the
/// tensor core finishes, so it may move a read of the accumulator (a softmax max, a conversion) above
/// the wait, or reuse an A-operand register the tensor core is still reading. An empty asm that
/// "reads and writes" each register, placed right after the wait (and around the issue), ties those
/// registers to that point: code using them cannot move across it. It costs no instruction.
template <register_tile RT>
__device__ inline void fence_operands(RT& t) {
#pragma unroll
    for (int i = 0; i < RT::n_regs; ++i) {
        if constexpr (tk::is_same_v<typename RT::dtype, float>) {
            asm volatile("" : "+f"(t.reg(i).x), "+f"(t.reg(i).y)::"memory");
        } else {
            asm volatile("" : "+r"(as_u32<typename RT::dtype>(t.reg(i)))::"memory");
        }
    }
}

}  // namespace tk::wgmma
