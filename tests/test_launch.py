"""Launching: argument checking on the CPU; real launches, errors and timing on a GPU."""

from __future__ import annotations

import numpy as np
import pytest

import tklab
from tklab import launch, signature


class FakeDeviceArray:
    """Just enough of __cuda_array_interface__ to test packing without a GPU."""

    def __init__(self, ptr: int, typestr: str):
        self.__cuda_array_interface__ = {"data": (ptr, False), "typestr": typestr, "shape": (4,), "version": 3}


def params(decl: str) -> list[signature.Param]:
    found = signature.find(decl, "k")
    assert found is not None
    return found


def test_signature_parsing_handles_qualifiers_templates_and_launch_bounds():
    src = """
    // extern "C" __global__ void k(int decoy);
    extern "C" __global__ void __launch_bounds__(256, 1)
    k(const float* __restrict__ a, __nv_bfloat16 *b, int n, float alpha,
      const __grid_constant__ CUtensorMap tmap, unsigned long long stride) { }
    """
    ps = params(src)
    assert [(p.ctype, p.name, p.pointer) for p in ps] == [
        ("float*", "a", True), ("__nv_bfloat16*", "b", True), ("int", "n", False),
        ("float", "alpha", False), ("CUtensorMap", "tmap", False), ("unsigned long long", "stride", False)]
    assert signature.find(src, "missing") is None
    assert signature.find("__global__ void k() {}", "k") == []


def test_scalars_pack_as_declared_types():
    ps = params('extern "C" __global__ void k(int n, float a, double d, unsigned long long s, bool f) {}')
    assert launch._pack("k", 0, 7, ps[0], 4) == np.int32(7).tobytes()
    assert launch._pack("k", 1, 0.5, ps[1], 4) == np.float32(0.5).tobytes()
    assert launch._pack("k", 2, 0.5, ps[2], 8) == np.float64(0.5).tobytes()
    assert launch._pack("k", 3, 2**40, ps[3], 8) == np.uint64(2**40).tobytes()
    assert launch._pack("k", 4, True, ps[4], 1) == b"\x01"


def test_bad_scalars_are_named():
    ps = params('extern "C" __global__ void k(int n, float* x) {}')
    with pytest.raises(OverflowError, match="'int n'"):
        launch._pack("k", 0, 2**40, ps[0], 4)
    with pytest.raises(TypeError, match="is an integer"):
        launch._pack("k", 0, 1.5, ps[0], 4)
    with pytest.raises(TypeError, match="pointer"):
        launch._pack("k", 1, 1.5, ps[1], 8)


def test_arrays_are_checked_for_place_and_dtype():
    ps = params('extern "C" __global__ void k(float* x, __nv_bfloat16* y, int n) {}')
    assert launch._pack("k", 0, FakeDeviceArray(0x1000, "<f4"), ps[0], 8) == np.uint64(0x1000).tobytes()
    assert launch._pack("k", 1, FakeDeviceArray(0x2000, "<u2"), ps[1], 8) == np.uint64(0x2000).tobytes()
    with pytest.raises(TypeError, match="holds float64"):
        launch._pack("k", 0, FakeDeviceArray(0x1000, "<f8"), ps[0], 8)
    with pytest.raises(TypeError, match="host \\(CPU\\) array"):
        launch._pack("k", 0, np.zeros(4, np.float32), ps[0], 8)
    with pytest.raises(TypeError, match="declared as a value"):
        launch._pack("k", 2, FakeDeviceArray(0x1000, "<i4"), ps[2], 4)


def test_by_value_structs_are_size_checked():
    class TensorMapLike:
        def as_kernel_arg(self) -> bytes:
            return bytes(range(128))

    assert launch._pack("k", 0, TensorMapLike(), None, 128) == bytes(range(128))
    with pytest.raises(TypeError, match="takes 64 bytes"):
        launch._pack("k", 0, TensorMapLike(), None, 64)
    with pytest.raises(TypeError, match="cannot pass a dict"):
        launch._pack("k", 0, {}, None, 8)


def test_grid_and_block_validation():
    assert launch._dims(4, "grid") == (4, 1, 1)
    assert launch._dims((2, 3), "grid") == (2, 3, 1)
    for bad in (0, (1, 2, 3, 4), (-1,), 1.5):
        with pytest.raises(ValueError):
            launch._dims(bad, "grid")


# ---------------------------------------------------------------------------------------------- GPU
SAXPY = r"""
extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void oob(float* y) { y[(1ull << 40) + threadIdx.x] = 1.0f; }
extern "C" __global__ void big_smem(float* y) {
  extern __shared__ float buf[];
  buf[threadIdx.x] = threadIdx.x; __syncthreads();
  y[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}
"""


@pytest.mark.gpu
def test_launch_with_cupy_arrays():
    import cupy as cp

    mod = tklab.compile(SAXPY)
    n = 100_003
    x, y = cp.random.rand(n, dtype=cp.float32), cp.random.rand(n, dtype=cp.float32)
    expected = 2.5 * x.get().astype(np.float64) + y.get()
    mod.saxpy(((n + 255) // 256,), (256,), (y, x, 2.5, n), sync=True)
    np.testing.assert_allclose(y.get(), expected, rtol=1e-6)


@pytest.mark.gpu
def test_launch_with_torch_tensors():
    torch = pytest.importorskip("torch")
    mod = tklab.compile(SAXPY)
    n = 4096
    x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    expected = (3.0 * x.double() + y.double()).cpu()
    mod.saxpy(n // 128, 128, (y, x, 3.0, n), sync=True)
    torch.testing.assert_close(y.cpu().double(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_wrong_argument_count_is_caught_before_launch():
    import cupy as cp

    mod = tklab.compile(SAXPY)
    with pytest.raises(TypeError, match="takes 4 arguments, got 3"):
        mod.saxpy(1, 32, (cp.zeros(32, cp.float32), cp.zeros(32, cp.float32), 1.0))


@pytest.mark.gpu
def test_dynamic_shared_memory_above_48k():
    import cupy as cp

    mod = tklab.compile(SAXPY)
    y = cp.full(1024, cp.nan, cp.float32)
    mod.big_smem(1, 1024, (y,), shared_mem=100 * 1024, sync=True)
    np.testing.assert_array_equal(y.get(), np.arange(1023, -1, -1, dtype=np.float32))


@pytest.mark.gpu
def test_launch_error_is_a_python_exception_naming_the_kernel():
    """Run in a child process: an illegal address poisons the CUDA context for good."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import cupy as cp, tklab
        mod = tklab.compile({SAXPY!r})
        try:
            mod.oob(1, 32, (cp.zeros(32, cp.float32),), sync=True)
        except tklab.LaunchError as e:
            print("CAUGHT", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "CAUGHT oob failed while running" in out.stdout, out.stdout + out.stderr
    assert "ILLEGAL_ADDRESS" in out.stdout


@pytest.mark.gpu
def test_bench_agrees_with_cuda_events_for_a_copy():
    import cupy as cp

    n = 1 << 27  # 512 MiB of float32: well past L2
    src, dst = cp.random.rand(n, dtype=cp.float32), cp.empty(n, cp.float32)
    r = tklab.bench(lambda: cp.copyto(dst, src), bytes=2 * src.nbytes, flush_l2=False)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(20):
        start.record()
        cp.copyto(dst, src)
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    manual = float(np.median(times))
    assert abs(r.ms - manual) / manual < 0.15, (r.ms, manual)
    assert r.gbps is not None and r.gbps > 100


@pytest.mark.gpu
def test_prepared_launch_repeats_the_checked_launch():
    import cupy as cp

    mod = tklab.compile(SAXPY)
    n = 10_000
    x, y = cp.random.rand(n, dtype=cp.float32), cp.random.rand(n, dtype=cp.float32)
    expected = 3 * 1.5 * x.get().astype(np.float64) + y.get()
    run = mod.saxpy.prepare((n + 127) // 128, 128, (y, x, 1.5, n))
    for _ in range(3):
        run()
    run(sync=True)
    np.testing.assert_allclose(y.get(), expected + 1.5 * x.get(), rtol=1e-5)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        mod.saxpy.prepare(1, 32, (y,))


@pytest.mark.gpu
def test_bench_batch_reports_per_call_time():
    import cupy as cp

    n = 1 << 26
    src, dst = cp.random.rand(n, dtype=cp.float32), cp.empty(n, cp.float32)
    one = tklab.bench(lambda: cp.copyto(dst, src), bytes=2 * src.nbytes, flush_l2=False)
    ten = tklab.bench(lambda: cp.copyto(dst, src), bytes=2 * src.nbytes, flush_l2=False, batch=10)
    assert abs(ten.ms - one.ms) / one.ms < 0.2, (one.ms, ten.ms)
    with pytest.raises(ValueError, match="batch"):
        tklab.bench(lambda: None, batch=0)
