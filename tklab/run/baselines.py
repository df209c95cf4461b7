"""The libraries a course kernel is timed against, called on the course's arrays.

Each returns a function that runs the library operation once (what ``tklab.bench`` times) and returns its
result. Public API: ``cublas_bf16(a, b, c)`` (bf16 GEMM through cuBLAS on CuPy uint16 arrays: no torch
needed), ``bf16_matmul(a, b)`` (torch.matmul on the same bits when torch is there, else ``cublas_bf16``),
``device_copy(src)`` (a device-to-device copy of the same bytes: the ceiling a copy kernel is read against).
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


def bf16_matmul(a: Any, b: Any) -> Callable[[], Any]:
    """``a @ b`` on bf16 bits (uint16 CuPy arrays) through torch.matmul (cuBLAS), viewing the same memory as
    torch.bfloat16; through ``cublas_bf16`` into a new array when torch is missing."""
    try:
        import torch

        ta, tb = (torch.from_dlpack(x).view(torch.bfloat16) for x in (a, b))
        return lambda: torch.matmul(ta, tb)
    except ImportError:
        import cupy as cp

        c = cp.empty((a.shape[0], b.shape[1]), cp.uint16)
        run = cublas_bf16(a, b, c)

        def matmul() -> Any:
            run()
            return c

        return matmul


def device_copy(src: Any) -> Callable[[], Any]:
    """A device-to-device copy of ``src`` (a CuPy array) into a new array of its shape."""
    import cupy as cp

    dst = cp.empty_like(src)

    def run() -> Any:
        dst.data.copy_from_device_async(src.data, src.nbytes)
        return dst

    return run
