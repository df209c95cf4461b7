"""occupancy.occupancy against the driver's own answer (cuOccupancyMaxActiveBlocksPerMultiprocessor) on a GPU."""

from __future__ import annotations

import pytest

from tklab import compiler, gpu, occupancy

# A kernel whose register appetite follows -maxrregcount: 64 live accumulators unless squeezed.
HUNGRY = r"""
extern "C" __global__ void hungry(const float* x, float* y, int n) {
    extern __shared__ float pad[];
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = x[(threadIdx.x * 64 + i) % n];
#pragma unroll 1
    for (int k = 0; k < n; ++k) {
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[i] = acc[i] * acc[(i + 1) % 64] + x[(k + i) % n];
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 64; ++i) s += acc[i];
    if (n < 0) pad[threadIdx.x] = s;
    y[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""


@pytest.mark.gpu
@pytest.mark.parametrize("maxrreg", [24, 40, 48, 64, 96, 128, 168, 200, 255])
def test_occupancy_matches_the_driver(maxrreg: int) -> None:
    from cuda.bindings import driver

    arch = gpu.arch()
    if not arch.startswith("sm_90"):
        pytest.skip("occupancy.occupancy models compute capability 9.0")
    mod = compiler.compile(HUNGRY, arch=arch, options=(f"--maxrregcount={maxrreg}",), name=f"hungry_{maxrreg}.cu")
    k = mod["hungry"]
    gpu.ensure_current()
    handle = gpu.check(driver.cuModuleLoadData(mod.cubin), "cuModuleLoadData")
    func = gpu.check(driver.cuModuleGetFunction(handle, b"hungry"), "cuModuleGetFunction")
    try:
        for threads in (32, 64, 96, 128, 256, 512, 1024):
            for smem in (0, 4096, 50 * 1024):
                if smem > 48 * 1024:
                    gpu.check(driver.cuFuncSetAttribute(
                        func, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem),
                        "cuFuncSetAttribute")
                err, blocks = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(func, threads, smem)
                if err != driver.CUresult.CUDA_SUCCESS:
                    blocks = 0  # the driver refuses shapes that cannot launch at all
                model = occupancy.occupancy(k.registers, threads, smem).blocks_per_sm
                assert model == blocks, f"{k.registers} registers x {threads} threads, {smem} B: model {model}, " \
                                        f"driver {blocks}"
    finally:
        driver.cuModuleUnload(handle)
