"""The CPU emulator: the CUDA shim, the launch API, and every CUDA solution of the course on the CPU.

The solutions are run at small sizes on fresh random inputs and compared with a float64 reference, as
``tklab.check`` compares them on a GPU.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tklab
from tklab import attention, gemm, specs
from tklab.run.arrays import bf16_to_float32, to_bf16_bits

emu = pytest.importorskip("tklab.emulate")
ROOT = Path(__file__).resolve().parent.parent


def _compile(src: str, name: str = "k.cu", **kw):
    return emu.compile(src, name=name, **kw)


# ---- the shim ------------------------------------------------------------------------------------------------
def test_thread_and_block_indices_in_three_dimensions() -> None:
    src = r"""
extern "C" __global__ void k(int* out) {
  const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int nt = blockDim.x * blockDim.y * blockDim.z;
  out[b * nt + t] = 1000 * b + 100 * threadIdx.z + 10 * threadIdx.y + threadIdx.x;
}"""
    out = np.full(2 * 3 * 2 * 4 * 3 * 2, -1, np.int32)
    _compile(src)["k"]((2, 3, 2), (4, 3, 2), (out,))
    want = [1000 * b + 100 * z + 10 * y + x for b in range(12) for z in range(2) for y in range(3) for x in range(4)]
    assert out.tolist() == want


def test_warp_shuffles_votes_and_block_reductions() -> None:
    src = r"""
extern "C" __global__ void k(int* out) {
  const int lane = threadIdx.x % 32;
  int sum = lane;
  for (int o = 16; o; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const unsigned odd = __ballot_sync(0xffffffffu, lane & 1);
  const int up = __shfl_up_sync(0xffffffffu, lane, 3);
  const int down = __shfl_down_sync(0xffffffffu, lane, 5);
  const int bcast = __shfl_sync(0xffffffffu, lane * 7, 9);
  const int n = __syncthreads_count(threadIdx.x < 40);
  const float f = __shfl_xor_sync(0xffffffffu, float(lane) + 0.5f, 1);
  out[threadIdx.x * 7 + 0] = sum;
  out[threadIdx.x * 7 + 1] = int(odd);
  out[threadIdx.x * 7 + 2] = up;
  out[threadIdx.x * 7 + 3] = down;
  out[threadIdx.x * 7 + 4] = bcast;
  out[threadIdx.x * 7 + 5] = n;
  out[threadIdx.x * 7 + 6] = int(f * 2);
}"""
    out = np.zeros(64 * 7, np.int32)
    _compile(src)["k"]((1,), (64,), (out,))
    rows = out.reshape(64, 7)
    for t in range(64):
        lane = t % 32
        assert rows[t].tolist() == [496, 0xAAAAAAAA - 2**32, lane - 3 if lane >= 3 else lane,
                                    lane + 5 if lane + 5 < 32 else lane, 63, 40, int((lane ^ 1) * 2 + 1)]


def test_atomics_across_blocks_and_shared_memory_kinds() -> None:
    src = r"""
__shared__ int hits;                 // namespace scope
extern "C" __global__ void k(float* total, int* counts, unsigned* maxv) {
  extern __shared__ float dyn[];
  __shared__ float partial[64];
  if (threadIdx.x == 0) hits = 0;
  dyn[threadIdx.x] = 1.0f;
  __syncthreads();
  atomicAdd(&hits, 1);
  partial[threadIdx.x] = dyn[threadIdx.x] * 2.0f;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0;
    for (int i = 0; i < 64; ++i) s += partial[i];
    atomicAdd(total, s);
    counts[blockIdx.x] = hits;
  }
  atomicMax(maxv, blockIdx.x * 64 + threadIdx.x);
}"""
    total, counts, maxv = np.zeros(1, np.float32), np.zeros(5, np.int32), np.zeros(1, np.uint32)
    _compile(src)["k"]((5,), (64,), (total, counts, maxv), shared_mem=64 * 4, workers=2)
    assert total[0] == 5 * 128 and counts.tolist() == [64] * 5 and maxv[0] == 5 * 64 - 1


def test_printf_output_and_float16_types() -> None:
    src = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void k(float* out) {
  __half h = __float2half(1.5f);
  __nv_bfloat16 b = __float2bfloat16(2.25f);
  __nv_bfloat162 p = __floats2bfloat162_rn(1.0f, 3.0f);
  out[0] = __half2float(h * h) + float(b) + __high2float(p);
  if (threadIdx.x == 0) printf("hello from block %d\n", blockIdx.x);
}"""
    out = np.zeros(1, np.float32)
    res = _compile(src)["k"]((1,), (32,), (out,))
    assert out[0] == pytest.approx(1.5 * 1.5 + 2.25 + 3.0)
    assert res.output == "hello from block 0\n"


def test_arguments_are_checked_before_the_launch() -> None:
    src = 'extern "C" __global__ void k(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] = 1; }'
    k = _compile(src)["k"]
    with pytest.raises(TypeError, match="takes 2 arguments"):
        k((1,), (32,), (np.zeros(4, np.float32),))
    with pytest.raises(TypeError, match="expects float data"):
        k((1,), (32,), (np.zeros(4, np.float64), 4))
    with pytest.raises(ValueError, match="at most 1024 threads"):
        k((1,), (2048,), (np.zeros(4, np.float32), 4))
    with pytest.raises(ValueError, match="dynamic shared memory"):
        k((1,), (32,), (np.zeros(4, np.float32), 4), shared_mem=300 * 1024)


def test_compile_errors_point_at_the_learners_line() -> None:
    with pytest.raises(emu.EmulationCompileError, match=r"broken\.cu:2:"):
        _compile('extern "C" __global__ void k(float* x) {\n  x[0] = undefined_name;\n}', name="broken.cu")


def test_tklab_compile_with_target_cpu_returns_an_emulated_module() -> None:
    mod = tklab.compile('extern "C" __global__ void k(int* x) { x[threadIdx.x] = threadIdx.x; }', arch="sm_80",
                        target="cpu")
    x = np.zeros(32, np.int32)
    mod["k"](1, 32, (x,))
    assert x.tolist() == list(range(32)) and "CPU" in repr(mod)


def test_an_instruction_that_is_not_modelled_says_so_when_reached() -> None:
    """The interpreter runs what sm_90a compiles to; an instruction it does not model stops the launch only when a
    thread executes it, naming the instruction and the learner's line."""
    src = r"""
extern "C" __global__ void k(int* x, int go) {
  if (go) asm volatile("barrier.cluster.arrive;" ::: "memory");
  x[0] = 1;
}"""
    mod = _compile(src)
    assert any("barrier.cluster" in u for u in mod.unsupported)
    x = np.zeros(1, np.int32)
    mod["k"](1, 32, (x, 0))  # not reached: runs
    assert x[0] == 1
    with pytest.raises(emu.NotEmulated, match=r"not modelled: `barrier\.cluster\.arrive.* at k\.cu:3"):
        mod["k"](1, 32, (x, 1))


def test_the_native_engine_says_so_for_an_instruction_it_does_not_emulate() -> None:
    src = r"""
extern "C" __global__ void k(int* x, int go) {
  if (go) asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
  x[0] = 1;
}"""
    mod = _compile(src, engine="native")
    assert any("tcgen05" in u for u in mod.unsupported)
    x = np.zeros(1, np.int32)
    mod["k"](1, 32, (x, 0))  # not reached: runs
    assert x[0] == 1
    with pytest.raises(emu.NotEmulated, match=r"tcgen05\.fence.*is not emulated"):
        mod["k"](1, 32, (x, 1))


# ---- every CUDA solution ----------------------------------------------------------------------------------------
def _run_spec(exercise: str, dims: dict[str, int], seed: int = 3) -> None:
    spec = specs.get(exercise)
    mod = emu.compile((ROOT / spec.solution).read_text(), arch="sm_90a", name=spec.filename, options=spec.options)
    host = spec.inputs(np.random.default_rng(seed), dims)
    arrays = dict(host)
    for name, (shape, dtype) in spec.outputs(dims).items():
        arrays[name] = np.full(shape, np.nan, dtype=dtype)
    shape = spec.launch(dims)
    mod[spec.kernel](shape.grid, shape.block, spec.args(arrays, dims), shared_mem=shape.shared_mem)
    for name, want in spec.reference(host, dims).items():
        np.testing.assert_allclose(arrays[name], want, rtol=spec.rtol, atol=spec.atol)


@pytest.mark.parametrize("exercise,dims", [
    ("ch02_smem_tiling", {"M": 33, "N": 65, "K": 47}),
    ("ch03_register_blocking", {"M": 128, "N": 256, "K": 24}),
    ("ch04_swizzle", {"M": 33, "N": 70}),
    ("ch05_mma", {"M": 16, "N": 16, "K": 16, "trial": 0}),
    ("ch06_tiles", {"M": 256, "N": 128, "K": 64}),
])
def test_exercise_solutions_are_correct_under_emulation(exercise: str, dims: dict[str, int]) -> None:
    _run_spec(exercise, dims)


def _bf16(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return to_bf16_bits(rng.uniform(-1, 1, shape).astype(np.float32))


def test_gemm_mma_tiles_solution() -> None:
    rng = np.random.default_rng(5)
    m, n, k = 256, 128, 96
    a, b = _bf16(rng, (m, k)), _bf16(rng, (k, n))
    c = np.full((m, n), 0xFFFF, np.uint16)
    mod = emu.compile((ROOT / "solutions" / "gemm_mma_tiles.cu").read_text(), name="gemm_mma_tiles.cu")
    tile, facts = gemm.mma_tiles_options(), gemm.launch_facts(mod)  # the file's tile; the launch it declares
    mod["gemm_mma_tiles"]((n // tile["BN"], m // tile["BM"]), (facts["threads"],), (a, b, c, m, n, k),
                          shared_mem=facts["shared_bytes"])
    ref = bf16_to_float32(a).astype(np.float64) @ bf16_to_float32(b)
    np.testing.assert_allclose(bf16_to_float32(c), ref, rtol=1e-2, atol=1e-2)


def test_gemm_wgmma_solution_with_tma_and_warp_specialisation() -> None:
    rng = np.random.default_rng(6)
    m, n, k = 256, 256, 192
    a, b = _bf16(rng, (m, k)), _bf16(rng, (k, n))
    c = np.full((m, n), 0xFFFF, np.uint16)
    step = gemm.STEPS["2_warp_specialised"]
    mod = emu.compile(step.path.read_text(), name=step.source)
    maps = [emu.tensor_map(x, box, dtype="bfloat16") for x, box in zip((a, b), gemm.tma_boxes(step), strict=True)]
    facts = gemm.launch_facts(mod)
    mod["gemm"](gemm.tile_grid(step, m, n), (facts["threads"],), (*maps, c, m, n, k), shared_mem=facts["shared_bytes"])
    ref = bf16_to_float32(a).astype(np.float64) @ bf16_to_float32(b)
    np.testing.assert_allclose(bf16_to_float32(c), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("kernel,d,n,causal", [("tiles", 64, 77, True), ("hopper", 128, 130, True)])
def test_flash_attention_solutions(kernel: str, d: int, n: int, causal: bool) -> None:
    rng = np.random.default_rng(7)
    b, h = 1, 2
    cfg = attention.build(kernel, d)
    q, k, v = (to_bf16_bits(rng.standard_normal((b, h, n, d)).astype(np.float32)) for _ in range(3))
    o, lse = np.full((b, h, n, d), 0xFFFF, np.uint16), np.full((b, h, n), np.nan, np.float32)
    mod = emu.compile(cfg.source.read_text(), name=cfg.source.name, options=cfg.options)
    scale = np.float32(1 / np.sqrt(d))
    if kernel == "tiles":
        args = (q, k, v, o, lse, h, n, h * n * d, n * d, d, scale, int(causal))
    else:
        bc = int(dict(opt[2:].split("=") for opt in cfg.options)["BC"])
        maps = [emu.tensor_map(x, (rows, d), dtype="bfloat16") for x, rows in ((q, 64), (k, bc), (v, bc), (o, 64))]
        args = (*maps, lse, h, n, scale, int(causal))
    grid = ((n + cfg.block_rows - 1) // cfg.block_rows, h, b)
    mod["flash_fwd"](grid, (cfg.threads,), args, shared_mem=cfg.shared_bytes)
    ref_o, ref_lse = attention.naive(*(bf16_to_float32(x) for x in (q, k, v)), causal=causal)
    np.testing.assert_allclose(bf16_to_float32(o), ref_o, atol=2e-2, rtol=2e-2)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3)
