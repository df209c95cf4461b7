"""Make numba-cuda importable with numpy 2.5, which removed ``np.row_stack``.

numba-cuda 0.30.4 (the newest release as of 2026-11) still refers to ``np.row_stack`` while it
registers its numpy typing; with numpy >= 2.5 that fails and ``numba.cuda.jit`` cannot compile
anything. ``row_stack`` was an exact alias of ``vstack`` (deprecated in numpy 2.0), so restoring the
alias is behaviour-preserving. ``patch()`` only adds the name when it is missing; it never replaces
anything numpy still has. Call it before importing ``numba.cuda`` (``tklab.toolchain.numba_compat.cuda()``
does both).

``cuda()`` also picks numba's CUDA simulator when there is no GPU (``NUMBA_ENABLE_CUDASIM=1``), so
chapter 01's kernels run on a laptop; it must run before anything imports ``numba.cuda``.
``numba_gpu_ready()`` asks (in a child process) whether numba can compile and run on this GPU at all,
and ``numba_sass(path, name, ndims)`` shows a numba kernel's machine code, as for CUDA C kernels.

Public API: ``patch()``, ``cuda(simulate=None)``, ``numba_gpu_ready()``, ``numba_sass(path, name, ndims)``.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..run import gpu


def patch() -> bool:
    """Restore ``np.row_stack`` if this numpy lacks it; returns True when the alias was added."""
    if hasattr(np, "row_stack"):
        return False
    np.row_stack = np.vstack  # type: ignore[attr-defined]
    return True


def cuda(simulate: bool | None = None) -> Any:
    """``numba.cuda``, imported after ``patch()``; the simulator when there is no GPU (or ``simulate=True``)."""
    patch()
    if simulate is None:
        simulate = not gpu.available()
    wanted = "1" if simulate else "0"
    if "numba.cuda" in sys.modules:
        if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") != wanted:
            raise RuntimeError("numba.cuda was already imported in the other mode; restart the kernel "
                               "and call tklab.toolchain.numba_compat.cuda() before importing numba.cuda")
    else:
        os.environ["NUMBA_ENABLE_CUDASIM"] = wanted
    from numba import cuda as numba_cuda

    return numba_cuda


_NUMBA_PROBE = """
import numpy as np
from tklab import numba_compat
cuda = numba_compat.cuda(simulate=False)

@cuda.jit
def probe(a):
    a[cuda.grid(1)] = 1.0

a = cuda.device_array(32, dtype=np.float32)
probe[1, 32](a)
assert (a.copy_to_host() == 1.0).all()
"""


@functools.cache
def numba_gpu_ready(timeout: float = 300.0) -> bool:
    """Can numba.cuda compile and run a kernel on this machine's GPU? False without a GPU.

    Why a real attempt in a child process: numba needs NVVM and libdevice (a CUDA toolkit, or the
    ``nvidia-nvvm`` wheel) to compile for a GPU, and once ``numba.cuda`` is imported its mode cannot
    change; probing outside lets a notebook fall back to the simulator before it imports numba.cuda.
    """
    if not gpu.available():
        return False
    try:
        done = subprocess.run([sys.executable, "-c", _NUMBA_PROBE], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


_NUMBA_SASS = r"""
import importlib.util, json, os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
from tklab import numba_compat
numba_compat.patch()
from numba import cuda, types
path, name, ndims, cc = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
spec = importlib.util.spec_from_file_location("_numba_source", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
sig = tuple(types.Array(types.float32, n, "C") for n in ndims)
ptx, _ = cuda.compile_ptx(getattr(module, name).py_func, sig, cc=tuple(int(c) for c in cc))
sys.stdout.write(ptx)
"""


def numba_sass(path: str, name: str, ndims: Iterable[int], *, arch: str = "sm_90") -> str:
    """SASS of the numba.cuda kernel ``name`` in the file ``path``, for float32 C-ordered array arguments.

    numba compiles Python to PTX with NVVM (no GPU needed); nvJitLink turns the PTX into machine code and
    cuobjdump prints it, exactly as for CUDA C kernels. It runs in a child process because a notebook that
    already uses numba's simulator cannot switch numba back to compiling for a GPU.
    """
    import json

    from cuda.bindings import nvjitlink

    from . import sass

    cc = arch.removeprefix("sm_").rstrip("a")
    done = subprocess.run([sys.executable, "-c", _NUMBA_SASS, str(path), name, json.dumps(list(ndims)), cc],
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"numba could not compile {name} to PTX: {done.stderr.strip().splitlines()[-1:]}")
    ptx = done.stdout.encode()
    handle = nvjitlink.create(2, [f"-arch={arch}", "-O3"])
    try:
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, ptx, len(ptx), f"{name}.ptx")
        nvjitlink.complete(handle)
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
    finally:
        nvjitlink.destroy(handle)
    return "\n".join(sass.disassemble(bytes(cubin)).values())
