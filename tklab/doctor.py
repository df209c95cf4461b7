"""``python -m tklab doctor``: what works on this machine, and what each missing piece costs you.

Each check is a real attempt (compile a Hopper kernel, disassemble it, import CuPy, ...), not a look
at version strings, so a green line means the lesson step that needs it will work.

Public API: ``checks() -> list[Check]``, ``main(argv) -> int``.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    cost: str = ""  # what the learner loses when this is missing


_PROBE = r"""
extern "C" __global__ void probe(float* out) {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  out[threadIdx.x] = threadIdx.x;
}
"""


def _attempt(name: str, cost: str, fn: Callable[[], str]) -> Check:
    try:
        return Check(name, True, fn())
    except Exception as e:  # noqa: BLE001 - any failure is reported, never raised
        return Check(name, False, f"{type(e).__name__}: {e}".splitlines()[0][:200], cost)


def _nvrtc() -> str:
    from . import cache, compiler, toolchain

    os.environ["TKLAB_NO_CACHE"] = "1"
    try:
        t = time.perf_counter()
        compiler.compile(_PROBE, arch="sm_90a")
        dt = time.perf_counter() - t
    finally:
        del os.environ["TKLAB_NO_CACHE"]
    major, minor = toolchain.nvrtc_version()
    return f"NVRTC {major}.{minor}: compiled a wgmma kernel for sm_90a in {dt:.2f} s (cache: {cache.cache_dir()})"


def _sass() -> str:
    from . import compiler, toolchain

    mod = compiler.compile(_PROBE, arch="sm_90a")
    if "WARPGROUP" not in mod.sass:
        raise RuntimeError("disassembly does not show Hopper instructions; install nvidia-cuda-cuobjdump>=13.2")
    return f"cuobjdump at {toolchain.binary('cuobjdump')}: Hopper SASS readable"


def _gpu() -> str:
    from . import gpu

    if not gpu.available():
        raise RuntimeError("no CUDA GPU or driver found")
    from cuda.bindings import driver

    p = gpu.properties()
    _, ver = driver.cuDriverGetVersion()
    return f"{p.name} ({gpu.arch()}, {p.sm_count} SMs), driver CUDA {ver // 1000}.{ver % 1000 // 10}"


def _cupy() -> str:
    import cupy

    if not cupy.is_available():
        raise RuntimeError(f"CuPy {cupy.__version__} is installed but sees no GPU")
    return f"CuPy {cupy.__version__} sees the GPU"


def _torch() -> str:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"torch {torch.__version__} is installed but sees no GPU")
    return f"torch {torch.__version__} sees the GPU"


def _simulator() -> str:
    code = ("from tklab import numba_compat; cuda = numba_compat.cuda()\n"
            "import numpy as np\n"
            "@cuda.jit\ndef k(x):\n    x[cuda.threadIdx.x] = cuda.threadIdx.x\n"
            "a = np.zeros(4, np.float32); k[1, 4](a); assert list(a) == [0, 1, 2, 3], a\n")
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    if out.returncode:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed")
    import numba

    return f"numba {numba.__version__}: CUDA simulator runs kernels on the CPU"


def checks() -> list[Check]:
    return [
        Check("python", True, f"Python {platform.python_version()} on {platform.machine()}"),
        _attempt("compiler (NVRTC)", "no compiling at all: `pip install nvidia-cuda-nvrtc cuda-bindings`", _nvrtc),
        _attempt("disassembler", "no SASS, registers or instruction mix: `pip install nvidia-cuda-cuobjdump`",
                 _sass),
        _attempt("GPU", "kernels cannot run; notebooks show results recorded on an H200 instead", _gpu),
        _attempt("CuPy", "no GPU arrays for launching kernels: `pip install cupy-cuda13x` (cupy-cuda12x "
                 "for CUDA 12 drivers)", _cupy),
        _attempt("PyTorch", "optional: only for passing torch tensors and the SDPA comparisons", _torch),
        _attempt("CUDA simulator", "chapter 01's numba kernels cannot run without a GPU", _simulator),
        _attempt("CPU emulator", "CUDA exercises cannot be checked without a GPU: install g++ or clang++ (or `pip "
                 "install ziglang`)", lambda: __import__("tklab.emulate", fromlist=["describe"]).describe()),
    ]


def main(argv: list[str] | None = None) -> int:
    results = checks()
    width = max(len(c.name) for c in results)
    for c in results:
        mark = "ok  " if c.ok else "MISS"
        print(f"[{mark}] {c.name:<{width}}  {c.detail}")
        if not c.ok:
            print(f"       {'':<{width}}  → costs you: {c.cost}")
    cpu_path = all(c.ok for c in results if c.name in ("compiler (NVRTC)", "disassembler"))
    print("\nCPU path (compile, inspect, models, widgets, simulator):", "ready" if cpu_path else "INCOMPLETE")
    print("GPU path (launch, bench, checks against the reference):",
          "ready" if all(c.ok for c in results if c.name in ("GPU", "CuPy")) else "not available here")
    return 0 if cpu_path else 1
