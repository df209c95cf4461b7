"""The PTX interpreter's instructions against what the PTX ISA says they compute, one family per test.

Each kernel is CUDA whose inline PTX (or intrinsics NVRTC lowers to one instruction) pins down the instruction
under test; the expected values are computed here, from the ISA's definitions, not from a run of the interpreter.
The course's kernels, their planted mistakes and the emulator's own tests cover the instructions in context; these
cover the corners a kernel may hit and the course's kernels do not (rounding modes, saturation, NaN, shifts past
the width, division by zero, the warp-wide instructions' masks and widths).
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from tklab import emulate

pytestmark = pytest.mark.skipif(emulate.engine() != "ptx", reason="no NVRTC here: the interpreter has no PTX")


def _run(src: str, out: np.ndarray, *args: object, threads: int = 32, name: str = "k") -> np.ndarray:
    mod = emulate.compile(src, arch="sm_90a", name="semantics.cu")
    assert isinstance(mod, emulate.PtxModule)
    mod[name](1, threads, (out, *args))
    return out


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def test_float_to_int_rounds_saturates_and_maps_nan_to_zero() -> None:
    src = r"""
extern "C" __global__ void k(int* out, const float* x) {
  const int i = threadIdx.x;
  const float v = x[i];
  int rn, rz, rm, rp; unsigned u;
  asm("cvt.rni.s32.f32 %0, %1;" : "=r"(rn) : "f"(v));
  asm("cvt.rzi.s32.f32 %0, %1;" : "=r"(rz) : "f"(v));
  asm("cvt.rmi.s32.f32 %0, %1;" : "=r"(rm) : "f"(v));
  asm("cvt.rpi.s32.f32 %0, %1;" : "=r"(rp) : "f"(v));
  asm("cvt.rzi.u32.f32 %0, %1;" : "=r"(u) : "f"(v));
  out[5 * i + 0] = rn; out[5 * i + 1] = rz; out[5 * i + 2] = rm; out[5 * i + 3] = rp; out[5 * i + 4] = int(u);
}"""
    x = np.array([2.5, -2.5, 3.5, -0.7, 1e20, -1e20, np.nan, 7.0], np.float32)
    out = _run(src, np.zeros(5 * 8, np.int32), x, threads=8).reshape(8, 5)
    for i, v in enumerate(x.tolist()):
        if math.isnan(v):
            assert out[i].tolist() == [0, 0, 0, 0, 0]
            continue
        clamp = lambda r: max(-2**31, min(2**31 - 1, r))  # noqa: E731
        want = [clamp(int(np.rint(v))), clamp(math.trunc(v)), clamp(math.floor(v)), clamp(math.ceil(v)),
                np.uint32(max(0, min(2**32 - 1, math.trunc(v)))).view(np.int32)]
        assert out[i].tolist() == want, (v, out[i].tolist(), want)


def test_half_conversions_round_to_nearest_even() -> None:
    src = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
extern "C" __global__ void k(unsigned short* out, const float* x) {
  const int i = threadIdx.x;
  out[2 * i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
  out[2 * i + 1] = __half_as_ushort(__float2half_rn(x[i]));
}"""
    x = np.array([1.0, 1.00390625, 1.0078125 + 2**-10, -3.14159, 65504.0, 1e6, 2**-24, 0.1], np.float32)
    out = _run(src, np.zeros(16, np.uint16), x, threads=8).reshape(8, 2)
    bits = x.view(np.uint32).astype(np.uint64)
    bf16 = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    assert out[:, 0].tolist() == bf16.tolist()
    with np.errstate(over="ignore"):  # 1e6 is past float16's range: infinity, as the instruction gives
        assert out[:, 1].tolist() == x.astype(np.float16).view(np.uint16).tolist()


def test_comparisons_with_nan_and_combined_predicates() -> None:
    src = r"""
extern "C" __global__ void k(int* out, const float* a, const float* b) {
  const int i = threadIdx.x;
  int r[5];
  asm("{ .reg .pred p; setp.lt.f32 p, %1, %2; selp.s32 %0, 1, 0, p; }" : "=r"(r[0]) : "f"(a[i]), "f"(b[i]));
  asm("{ .reg .pred p; setp.ltu.f32 p, %1, %2; selp.s32 %0, 1, 0, p; }" : "=r"(r[1]) : "f"(a[i]), "f"(b[i]));
  asm("{ .reg .pred p; setp.neu.f32 p, %1, %2; selp.s32 %0, 1, 0, p; }" : "=r"(r[2]) : "f"(a[i]), "f"(b[i]));
  asm("{ .reg .pred p; setp.nan.f32 p, %1, %2; selp.s32 %0, 1, 0, p; }" : "=r"(r[3]) : "f"(a[i]), "f"(b[i]));
  asm("{ .reg .pred p, q; setp.gt.f32 q, %1, 0f00000000; setp.lt.and.f32 p, %1, %2, q; selp.s32 %0, 1, 0, p; }"
      : "=r"(r[4]) : "f"(a[i]), "f"(b[i]));
  for (int k = 0; k < 5; ++k) out[5 * i + k] = r[k];
}"""
    a = np.array([1.0, 2.0, np.nan, 1.0, -1.0], np.float32)
    b = np.array([2.0, 1.0, 1.0, np.nan, 3.0], np.float32)
    out = _run(src, np.zeros(25, np.int32), a, b, threads=5).reshape(5, 5)
    for i in range(5):
        x, y = float(a[i]), float(b[i])
        un = math.isnan(x) or math.isnan(y)
        want = [int(not un and x < y), int(un or x < y), int(un or x != y), int(un), int(not un and x < y and x > 0)]
        assert out[i].tolist() == want, (x, y)


def test_bit_manipulation() -> None:
    src = r"""
extern "C" __global__ void k(unsigned* out, const unsigned* x) {
  const int i = threadIdx.x;
  const unsigned v = x[i];
  unsigned r[9];
  asm("bfe.u32 %0, %1, 4, 8;" : "=r"(r[0]) : "r"(v));
  asm("bfe.s32 %0, %1, 4, 8;" : "=r"(r[1]) : "r"(v));
  asm("bfi.b32 %0, %1, %2, 8, 4;" : "=r"(r[2]) : "r"(v), "r"(0xffffffffu));
  asm("prmt.b32 %0, %1, %2, 0x5140;" : "=r"(r[3]) : "r"(v), "r"(0x89abcdefu));
  asm("lop3.b32 %0, %1, %2, %3, 0x96;" : "=r"(r[4]) : "r"(v), "r"(0x0f0f0f0fu), "r"(0x33333333u));
  asm("shf.l.wrap.b32 %0, %1, %2, 36;" : "=r"(r[5]) : "r"(v), "r"(0x12345678u));
  asm("shf.r.clamp.b32 %0, %1, %2, 40;" : "=r"(r[6]) : "r"(v), "r"(0x12345678u));
  r[7] = __popc(v) | (__clz(int(v)) << 8) | (unsigned(__ffs(int(v))) << 16);
  r[8] = __brev(v);
  for (int k = 0; k < 9; ++k) out[9 * i + k] = r[k];
}"""
    x = np.array([0x12345678, 0x80000000, 0xFFF0, 0, 0xDEADBEEF], np.uint32)
    out = _run(src, np.zeros(45, np.uint32), x, threads=5).reshape(5, 9)
    for i, v in enumerate(int(t) for t in x):
        field = (v >> 4) & 0xFF
        signed = field - 256 if field & 0x80 else field
        ins = (0xFFFFFFFF & ~(0xF << 8)) | ((v & 0xF) << 8)
        pool = v | (0x89ABCDEF << 32)
        prmt = sum(((pool >> (8 * ((0x5140 >> (4 * k)) & 7))) & 0xFF) << (8 * k) for k in range(4))
        lop = v ^ 0x0F0F0F0F ^ 0x33333333  # 0x96: a ^ b ^ c
        wide = (0x12345678 << 32) | v
        shl = ((wide << (36 & 31)) >> 32) & 0xFFFFFFFF
        shr = (wide >> 32) & 0xFFFFFFFF  # clamp: a shift of 40 is 32
        clz = 32 if v == 0 else 32 - v.bit_length()
        ffs = 0 if v == 0 else (v & -v).bit_length()
        misc = bin(v).count("1") | (clz << 8) | (ffs << 16)
        brev = int(f"{v:032b}"[::-1], 2)
        want = [field, signed & 0xFFFFFFFF, ins, prmt, lop, shl, shr, misc, brev]
        assert out[i].tolist() == want, (hex(v), [hex(o) for o in out[i]], [hex(w) for w in want])


def test_integer_multiply_divide_and_shifts_past_the_width() -> None:
    src = r"""
extern "C" __global__ void k(long long* out, const int* a, const int* b) {
  const int i = threadIdx.x;
  const int x = a[i], y = b[i];
  int hi, q, r, sl, sr; long long wide; unsigned uq;
  asm("mul.hi.s32 %0, %1, %2;" : "=r"(hi) : "r"(x), "r"(y));
  asm("mul.wide.s32 %0, %1, %2;" : "=l"(wide) : "r"(x), "r"(y));
  asm("div.s32 %0, %1, %2;" : "=r"(q) : "r"(x), "r"(y));
  asm("rem.s32 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
  asm("div.u32 %0, %1, %2;" : "=r"(uq) : "r"(x), "r"(y));
  asm("shl.b32 %0, %1, %2;" : "=r"(sl) : "r"(x), "r"(y & 63));
  asm("shr.s32 %0, %1, %2;" : "=r"(sr) : "r"(x), "r"(y & 63));
  out[7 * i + 0] = hi; out[7 * i + 1] = wide; out[7 * i + 2] = q; out[7 * i + 3] = r;
  out[7 * i + 4] = uq; out[7 * i + 5] = sl; out[7 * i + 6] = sr;
}"""
    a = np.array([123456789, -987654321, 7, -7, 5], np.int32)
    b = np.array([987654, 34, 2, 2, 0], np.int32)
    out = _run(src, np.zeros(35, np.int64), a, b, threads=5).reshape(5, 7)
    for i in range(5):
        x, y = int(a[i]), int(b[i])
        s = y & 63
        q = -1 if y == 0 else int(x / y)  # truncated; the GPU's answer to / 0 is all ones
        r = x if y == 0 else x - y * int(x / y)
        uq = 0xFFFFFFFF if y == 0 else (x & 0xFFFFFFFF) // (y & 0xFFFFFFFF)
        sl = 0 if s >= 32 else np.int32(np.uint32((x << s) & 0xFFFFFFFF).view(np.int32))
        sr = (-1 if x < 0 else 0) if s >= 32 else x >> s
        want = [(x * y) >> 32, x * y, q, r, uq, int(sl), sr]
        assert out[i].tolist() == want, (x, y, out[i].tolist(), want)


def test_float_min_max_ftz_and_special_functions() -> None:
    src = r"""
extern "C" __global__ void k(float* out, const float* a, const float* b) {
  const int i = threadIdx.x;
  float r[5];
  asm("min.f32 %0, %1, %2;" : "=f"(r[0]) : "f"(a[i]), "f"(b[i]));
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r[1]) : "f"(a[i]), "f"(b[i]));
  asm("add.ftz.f32 %0, %1, %2;" : "=f"(r[2]) : "f"(a[i]), "f"(b[i]));
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r[3]) : "f"(a[i]));
  asm("fma.rn.sat.f32 %0, %1, %2, 0f3F000000;" : "=f"(r[4]) : "f"(a[i]), "f"(b[i]));
  for (int k = 0; k < 5; ++k) out[5 * i + k] = r[k];
}"""
    tiny = np.float32(1e-39)  # subnormal
    a = np.array([1.0, np.nan, tiny, -3.0], np.float32)
    b = np.array([np.nan, 2.0, tiny, 0.25], np.float32)
    out = _run(src, np.zeros(20, np.float32), a, b, threads=4).reshape(4, 5)
    assert out[0, 0] == 1.0 and math.isnan(out[0, 1])  # min keeps the number; max.NaN gives NaN
    assert out[1, 0] == 2.0 and math.isnan(out[1, 1])
    assert out[2, 2] == 0.0  # subnormals flushed before and after
    assert out[3, 3] == pytest.approx(0.125)
    assert out[3, 4] == 0.0 and out[0, 4] == 0.0  # saturated to [0, 1], NaN to 0
    assert out[1, 4] == 0.0


def test_shuffles_with_widths_votes_and_reductions() -> None:
    src = r"""
extern "C" __global__ void k(int* out) {
  const int lane = threadIdx.x;
  out[6 * lane + 0] = __shfl_sync(0xffffffffu, lane * 10, 3, 8);      // lane 3 of each 8-lane segment
  out[6 * lane + 1] = __shfl_up_sync(0xffffffffu, lane, 2, 16);       // stays in its 16-lane half
  out[6 * lane + 2] = __shfl_down_sync(0xffffffffu, lane, 5, 16);
  out[6 * lane + 3] = __shfl_xor_sync(0xffffffffu, lane, 9);
  out[6 * lane + 4] = __reduce_add_sync(0xffffffffu, lane) + (__all_sync(0xffffffffu, lane < 40) << 16);
  out[6 * lane + 5] = __match_any_sync(0xffffffffu, lane / 4);
}"""
    out = _run(src, np.zeros(6 * 32, np.int32)).reshape(32, 6)
    for lane in range(32):
        up = lane - 2 if lane % 16 >= 2 else lane
        down = lane + 5 if lane % 16 + 5 < 16 else lane
        want = [((lane // 8) * 8 + 3) * 10, up, down, lane ^ 9, 496 + (1 << 16), 0xF << (4 * (lane // 4))]
        assert out[lane].tolist() == [w if w < 2**31 else w - 2**32 for w in want], lane


def test_atomics_on_global_and_shared_memory() -> None:
    src = r"""
extern "C" __global__ void k(float* out, int* counts) {
  __shared__ int hits[4];
  if (threadIdx.x < 4) hits[threadIdx.x] = 0;
  __syncthreads();
  atomicAdd(&hits[threadIdx.x % 4], 1);
  atomicAdd(out, 0.5f);
  atomicMax(&counts[0], int(threadIdx.x) - 10);
  atomicMin(&counts[1], int(threadIdx.x) - 10);
  atomicCAS(&counts[2], 0, int(threadIdx.x) + 100);  // only the first succeeds
  __syncthreads();
  if (threadIdx.x < 4) counts[3 + threadIdx.x] = hits[threadIdx.x];
}"""
    mod = emulate.compile(src, arch="sm_90a", name="semantics.cu")
    out, counts = np.zeros(1, np.float32), np.zeros(7, np.int32)
    mod["k"](1, 64, (out, counts))
    assert out[0] == 32.0
    assert counts[0] == 53 and counts[1] == -10 and counts[2] >= 100 and counts[3:].tolist() == [16] * 4


def test_local_arrays_calls_and_printf(capsys: pytest.CaptureFixture[str]) -> None:
    src = r"""

__device__ __noinline__ float weighted(const float* v, int n, float w) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += w * v[i];
  return s;
}
extern "C" __global__ void k(float* out, int pick) {
  float local[8];
  for (int i = 0; i < 8; ++i) local[i] = float(i * threadIdx.x);
  out[threadIdx.x] = local[(pick + threadIdx.x) % 8] + weighted(local, 8, 0.5f);
  if (threadIdx.x == 3) printf("thread %d of %d: %.2f\n", int(threadIdx.x), int(blockDim.x), out[3]);
}"""
    out = _run(src, np.zeros(4, np.float32), np.int32(5), threads=4)
    want = [((5 + t) % 8) * t + 0.5 * sum(i * t for i in range(8)) for t in range(4)]
    assert out.tolist() == want
    assert f"thread 3 of 4: {want[3]:.2f}" in capsys.readouterr().out


def test_vector_loads_and_stores_keep_their_alignment_rule() -> None:
    src = r"""
extern "C" __global__ void k(float* out, const float* in, int offset) {
  const float4 v = *reinterpret_cast<const float4*>(in + 4 * threadIdx.x + offset);
  *reinterpret_cast<float2*>(out + 4 * threadIdx.x) = make_float2(v.w, v.z);
  *reinterpret_cast<float2*>(out + 4 * threadIdx.x + 2) = make_float2(v.y, v.x);
}"""
    x = np.arange(36, dtype=np.float32)
    out = _run(src, np.zeros(32, np.float32), x, np.int32(0), threads=8)
    assert out.tolist() == [float(v) for i in range(8) for v in (4 * i + 3, 4 * i + 2, 4 * i + 1, 4 * i)]
    with pytest.raises(emulate.InvalidAddress, match="misaligned"):  # a float4 at a 4-byte offset: the GPU faults
        _run(src, np.zeros(32, np.float32), x, np.int32(1), threads=8)
