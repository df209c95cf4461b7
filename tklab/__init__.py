"""tklab: write, inspect and time Hopper GPU kernels from a notebook.

The short tour::

    import tklab
    mod = tklab.compile(src, arch="sm_90a")   # NVRTC, cached; the tile library is on the include path
    mod                                        # registers, shared memory, spills, instruction mix
    print(mod["gemm"].sass)                    # what the compiler made of it (no GPU needed)
    mod["gemm"](grid, block, (a, b, c, n))     # launch on CuPy arrays / torch tensors (GPU)
    tklab.bench(lambda: mod["gemm"](...), flops=2 * n**3)
    tklab.profile(mod["gemm"].prepare(...), flops=2 * n**3)   # Nsight Compute: what limits it (GPU + ncu)

Submodules are imported on first use, so ``import tklab`` stays fast and works without a GPU.
"""

from __future__ import annotations

import importlib
from typing import Any

from .bench import BenchResult, bench  # eager: binds tklab.bench to the function, not the submodule
from .check import check  # eager, like bench: tklab.check stays the function
from .compiler import CompileError, Kernel, Module, compile  # noqa: A004 - tklab.compile is the API
from .profile import profile  # eager, like bench: tklab.profile stays the function (package: tklab/profile/)

__version__ = "0.1.0"

_LAZY_MODULES = {"banks", "cache", "ceilings", "doctor", "exercises", "gpu", "grade",
                 "launch", "layouts", "magic", "sass", "signature", "tma", "toolchain", "widgets",
                 "numba_compat", "report", "recorded"}
_LAZY_NAMES = {"LaunchError": ("launch", "LaunchError"), "ProfileResult": ("profile", "ProfileResult"),
               "ProfileUnavailable": ("profile", "ProfileUnavailable")}

__all__ = ["BenchResult", "CompileError", "Kernel", "Module", "compile", "bench", "check", "LaunchError",
           "ProfileResult", "ProfileUnavailable", "profile", "load_ipython_extension"]


def __getattr__(name: str) -> Any:
    if name in _LAZY_NAMES:
        module, attr = _LAZY_NAMES[name]
        return getattr(importlib.import_module(f".{module}", __name__), attr)
    if name in _LAZY_MODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'tklab' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext tklab`` registers the ``%%tk`` cell magic."""
    from .magic import register

    register(ipython)
