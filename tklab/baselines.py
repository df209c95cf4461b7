"""The libraries a course kernel is timed against, called on the course's arrays.

Public API: ``cublas_bf16(a, b, c)`` (bf16 GEMM through cuBLAS on CuPy uint16 arrays: no torch needed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def cublas_bf16(a: Any, b: Any, c: Any) -> Callable[[], None]:
    """A function running ``c = a @ b`` with cuBLAS (bf16 in and out, fp32 accumulation) on row-major
    uint16 CuPy arrays: the library baseline of the tensor-core chapters.

    cuBLAS is column-major; a row-major C = A·B is the column-major Cᵀ = Bᵀ·Aᵀ, so B goes first.
    """
    import cupy as cp
    import numpy as np
    from cupy_backends.cuda.api.runtime import CUDA_R_16BF
    from cupy_backends.cuda.libs import cublas

    (m, k), n = a.shape, b.shape[1]
    if b.shape[0] != k or c.shape != (m, n):
        raise ValueError(f"cublas_bf16: shapes {a.shape} @ {b.shape} -> {c.shape} do not match")
    handle = cp.cuda.device.get_cublas_handle()
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)

    def run() -> None:
        cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)  # alpha, beta live on the host
        cublas.gemmEx(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, n, m, k,
                      one.ctypes.data, b.data.ptr, CUDA_R_16BF, n, a.data.ptr, CUDA_R_16BF, k,
                      zero.ctypes.data, c.data.ptr, CUDA_R_16BF, n, cublas.CUBLAS_COMPUTE_32F,
                      cublas.CUBLAS_GEMM_DEFAULT)

    return run
