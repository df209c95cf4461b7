"""tklab.profile on a real GPU: the recipe re-creates a launch exactly, and ncu's counters match a kernel
whose shared-memory traffic is known. Skipped without a GPU; the ncu test also without ncu or without
permission to read counters (the skip reason says which)."""

from __future__ import annotations

import numpy as np
import pytest

import tklab
from tklab.profile import ProfileUnavailable, ncu, recipe

SRC = r"""
extern "C" __global__ void add2(float* out, const float* x1, const float* x2, float a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x1[i] + a * x2[i];
}
// Each warp stores one word per lane to shared memory and loads one back: 1 STS + 1 LDS per warp,
// conflict-free (lane i uses word i), so ncu must count exactly one wavefront for each.
extern "C" __global__ void one_lds(float* out) {
    __shared__ float s[128];
    s[threadIdx.x] = threadIdx.x;
    __syncwarp();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s[threadIdx.x ^ 1];
}
"""


@pytest.fixture(scope="module")
def module(gpu_arch: str) -> tklab.Module:
    return tklab.compile(SRC, arch=gpu_arch, name="profile_gpu_test.cu")


@pytest.mark.gpu
def test_recipe_rebuilds_the_launch_with_aliasing_and_alignment(module, tmp_path) -> None:
    import cupy as cp
    from cuda.bindings import driver

    from tklab import gpu

    n = 1000
    base = cp.arange(2 * n + 64, dtype=cp.float32)
    x1, x2 = base[8:8 + n], base[16:16 + n]  # overlapping read-only views of one allocation, not 16-aligned
    out = cp.full(n + 3, cp.nan, cp.float32)[3:]  # an output that starts 12 bytes into its allocation
    run = module["add2"].prepare((4,), (256,), (out, x1, x2, np.float32(0.5), np.int32(n)))
    rec = recipe.capture(run, tmp_path, warmup=0)
    assert len(rec.buffers) == 2 and rec.args[1].buffer == rec.args[2].buffer != rec.args[0].buffer
    assert (rec.args[1].offset, rec.args[2].offset) == (0, 32)
    _, rebuilt = recipe.build(tmp_path)
    rebuilt()
    run()  # the original, on the original memory
    gpu.synchronize()
    address = int(np.frombuffer(rebuilt.packed[0], np.uint64)[0])
    assert address % 4096 == out.data.ptr % 4096
    got = np.empty(n, np.float32)
    gpu.check(driver.cuMemcpyDtoH(got.ctypes.data, address, got.nbytes), "reading the rebuilt output")
    np.testing.assert_array_equal(got, out.get())
    np.testing.assert_array_equal(got, (base[8:8 + n] + 0.5 * base[16:16 + n]).get())


@pytest.mark.gpu
def test_ncu_counts_the_shared_memory_traffic_of_a_known_kernel(module) -> None:
    import cupy as cp

    if ncu.find_ncu() is None:
        pytest.skip(ncu.missing_message())
    blocks, threads = 64, 128
    out = cp.zeros(blocks * threads, cp.float32)
    run = module["one_lds"].prepare((blocks,), (threads,), (out,))
    try:
        r = tklab.profile(run, timeout=240)
    except ProfileUnavailable as e:
        if e.reason == "permission":
            pytest.skip(str(e))
        raise
    warps = blocks * threads // 32
    assert r.live and r.kernel == "one_lds" and r.ms is not None and 0 < r.ms < 10
    assert r.metrics["smsp__inst_executed_op_shared_ld.sum"] == warps
    assert r.metrics["smsp__inst_executed_op_shared_st.sum"] == warps
    assert r.metrics["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"] == warps
    assert r.bank_conflicts == 0
    assert r.limiter.kind != "unknown", r.limiter.sentence
