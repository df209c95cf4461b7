"""``python -m tklab doctor``: what works on this machine, and what each missing piece costs you.

Each check is a real attempt (compile a Hopper kernel, disassemble it, import CuPy, profile a kernel under
Nsight Compute, ...), not a look at version strings, so a green line means the lesson step that needs it
will work.

Paths are shown relative to the places a reader knows (``~``, this Python's environment), so a stored
notebook output never shows someone else's machine. Run from an interpreter that is not the workbook's
``.venv`` (the usual mistake: ``python3 -m tklab doctor`` in the repository), it says so and how to fix it.

Public API: ``checks() -> list[Check]``, ``interpreter_note() -> str | None``, ``main(argv) -> int``.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..paths import REPO

ROOT = REPO


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


class Missing(Exception):
    """A probe's failure whose cost differs from the usual one (e.g. installed, but no GPU to use)."""

    def __init__(self, detail: str, cost: str):
        super().__init__(detail)
        self.cost = cost


def _attempt(name: str, cost: str, fn: Callable[[], str]) -> Check:
    try:
        return Check(name, True, fn())
    except Missing as e:
        return Check(name, False, str(e), e.cost)
    except Exception as e:  # noqa: BLE001 - any failure is reported, never raised
        return Check(name, False, f"{type(e).__name__}: {e}".splitlines()[0][:200], cost)


def shown(path: str | Path) -> str:
    """A path as a reader can place it: inside this Python's environment, under ~, or as is."""
    p = Path(path)
    for base, name in ((Path(sys.prefix), "<this Python's environment>"), (ROOT, "<repository>"),
                       (Path.home(), "~")):
        try:
            return f"{name}/{p.resolve().relative_to(base.resolve()).as_posix()}"
        except ValueError:
            continue
    return str(p)


def interpreter_note() -> str | None:
    """Why this interpreter may be the wrong one, or None when it is the workbook's own ``.venv``."""
    venv = ROOT / ".venv"
    here = Path(sys.prefix).resolve()
    if here == venv.resolve():
        return None
    if (venv / "bin" / "python").exists():
        return (f"this is {sys.executable}, not the workbook's .venv, which has every package installed: run "
                "`make doctor` (or `.venv/bin/python -m tklab doctor`, or `source .venv/bin/activate` first)")
    if sys.prefix == sys.base_prefix:
        return (f"this is {sys.executable}, a system Python without the workbook's packages: "
                "`make doctor` installs them into .venv and runs this check there")
    return None


def _nvrtc() -> str:
    from ..toolchain import cache, compiler, locate

    if (why := locate.nvrtc_missing()) is not None:
        if (ROOT / ".venv" / "bin" / "python").exists() and interpreter_note() is not None:
            raise Missing("compiling for the GPU needs NVRTC, which this Python cannot load", _nvrtc_cost())
        raise Missing(why.split(";")[0], _nvrtc_cost())
    os.environ["TKLAB_NO_CACHE"] = "1"
    try:
        t = time.perf_counter()
        compiler.compile(_PROBE, arch="sm_90a")
        dt = time.perf_counter() - t
    finally:
        del os.environ["TKLAB_NO_CACHE"]
    major, minor = locate.nvrtc_version()
    return (f"NVRTC {major}.{minor}: compiled a wgmma kernel for sm_90a in {dt:.2f} s "
            f"(cache: {shown(cache.cache_dir())})")


def _nvrtc_cost() -> str:
    """What a missing NVRTC costs: no compiling for the GPU; on macOS there is nothing to install."""
    if sys.platform == "darwin":
        return ("no GPU compiles, SASS or registers (NVRTC has no wheel for macOS): the chapters show their "
                "recorded outputs (see the CPU emulator line for checking exercises)")
    return ("no GPU compiles, SASS or registers (CUDA exercises are checked on the CPU emulator): `pip install "
            "nvidia-cuda-nvrtc cuda-bindings`")


def _emulator() -> str:
    from .. import emulate

    return emulate.describe()


def _cupy_cost() -> str:
    if sys.platform == "darwin":
        return "nothing on a Mac: CuPy drives NVIDIA GPUs, which macOS has none of (kernels run on the CPU emulator)"
    return "no GPU arrays for launching kernels: `pip install cupy-cuda13x` (cupy-cuda12x for CUDA 12 drivers)"


def _emulator_cost() -> str:
    if sys.platform == "darwin":
        return ("CUDA exercises cannot be checked: install Apple's clang++ with `xcode-select --install` (or `pip "
                "install ziglang`)")
    return "CUDA exercises cannot be checked without a GPU: install g++ or clang++ (or `pip install ziglang`)"


def _sass() -> str:
    from ..toolchain import compiler, locate

    if locate.nvrtc_missing() is not None:
        raise Missing("no cubin to read: SASS is read from what NVRTC compiles", "nothing more than the NVRTC line")
    mod = compiler.compile(_PROBE, arch="sm_90a")
    if "WARPGROUP" not in mod.sass:
        raise RuntimeError("disassembly does not show Hopper instructions; install nvidia-cuda-cuobjdump>=13.2")
    return f"cuobjdump at {shown(locate.binary('cuobjdump'))}: Hopper SASS readable"


def _gpu() -> str:
    from ..run import gpu

    if not gpu.available():
        raise RuntimeError("no CUDA GPU or driver found")
    from cuda.bindings import driver

    p = gpu.properties()
    _, ver = driver.cuDriverGetVersion()
    return f"{p.name} ({gpu.arch()}, {p.sm_count} SMs), driver CUDA {ver // 1000}.{ver % 1000 // 10}"


def _no_gpu_here() -> bool:
    from ..run import gpu

    return not gpu.available()


def _cupy() -> str:
    import cupy

    if not cupy.is_available():
        cost = ("nothing more than the GPU line above: CuPy is ready for when there is a GPU" if _no_gpu_here() else
                "no GPU arrays although there is a GPU: CuPy's CUDA version must match the driver's "
                "(`make lab GPU_PKGS=\"cupy-cuda12x numba-cuda[cu12]\"` for CUDA 12 drivers; see the README)")
        raise Missing(f"CuPy {cupy.__version__} is installed but sees no GPU", cost)
    return f"CuPy {cupy.__version__} sees the GPU"


def _torch() -> str:
    import torch

    if not torch.cuda.is_available():
        raise Missing(f"torch {torch.__version__} is installed but sees no GPU",
                      "optional: only for passing torch tensors and the SDPA comparisons")
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


_COUNTER_PROBE = r"""
extern "C" __global__ void probe(int n) {
  if (n < 0 && threadIdx.x == 0) __trap();
}
"""
_RECORDED = "chapters show the profiles recorded on an H200 instead"


def _profile_probe() -> str:
    """Profile a one-block kernel with tklab.profile: the real test of reading GPU counters here."""
    from ..profile import profile
    from ..run import gpu
    from ..toolchain import compiler

    mod = compiler.compile(_COUNTER_PROBE, arch=gpu.arch())
    result = profile(mod["probe"].prepare((1,), (32,), (1,)), timeout=180)
    duration = f" ({result.duration_s * 1e6:.1f} µs)" if result.duration_s else ""
    return f"read the GPU's counters for a test kernel{duration}"


def _ncu() -> str:
    from ..profile import ProfileUnavailable, ncu

    exe = ncu.find_ncu()
    if exe is None:
        raise Missing(ncu.missing_message(), ("nothing more than the GPU line above: " + _RECORDED) if _no_gpu_here()
                      else f"tklab.profile cannot measure your kernels; {_RECORDED}")
    found = f"Nsight Compute {ncu.version(exe) or '(version not reported)'} at {shown(exe)}"
    if _no_gpu_here():
        raise Missing(f"{found}, but no GPU to profile", "nothing more than the GPU line above: " + _RECORDED)
    try:
        return f"{found}: {_profile_probe()}"
    except ProfileUnavailable as e:
        if e.reason == "permission":
            raise Missing(f"{found}, but this user may not read the GPU's performance counters (ERR_NVGPUCTRPERM)",
                          f"tklab.profile cannot measure your kernels ({_RECORDED}). {ncu.PERMISSION_HELP}") from None
        raise Missing(f"{found}, but profiling a test kernel failed: {str(e).splitlines()[0][:200]}",
                      f"tklab.profile may not work here; {_RECORDED}") from None


# Where each check's package lives, to tell whether the workbook's .venv has it.
_PACKAGE_DIRS = {"compiler (NVRTC)": "cuda/bindings", "disassembler": "nvidia", "CuPy": "cupy", "PyTorch": "torch",
                 "CUDA simulator": "numba"}


def _in_venv(check: str) -> bool:
    where = _PACKAGE_DIRS.get(check)
    return bool(where) and any((ROOT / ".venv" / "lib").glob(f"python*/site-packages/{where}"))


def checks() -> list[Check]:
    return [
        Check("python", True, f"Python {platform.python_version()} on {platform.machine()}, "
              + ("the workbook's .venv" if interpreter_note() is None else shown(sys.executable))),
        _attempt("compiler (NVRTC)", _nvrtc_cost(), _nvrtc),
        _attempt("disassembler", "no SASS, registers or instruction mix: `pip install nvidia-cuda-cuobjdump`",
                 _sass),
        _attempt("GPU", "kernels cannot run; notebooks show results recorded on an H200 instead", _gpu),
        _attempt("CuPy", _cupy_cost(), _cupy),
        _attempt("PyTorch", "optional: only for passing torch tensors and the SDPA comparisons", _torch),
        _attempt("Nsight Compute", f"tklab.profile cannot measure your kernels; {_RECORDED}", _ncu),
        _attempt("CUDA simulator", "chapter 01's numba kernels cannot run without a GPU", _simulator),
        _attempt("CPU emulator", _emulator_cost(), _emulator),
    ]


def main(argv: list[str] | None = None) -> int:
    note = interpreter_note()
    if note:
        print(f"NOTE: {note}\n")
    results = checks()
    if note:
        for c in results:  # a package missing here but present in .venv is not missing: don't advise pip
            if not c.ok and _in_venv(c.name):
                c.cost = "nothing in the workbook's .venv, which has it: see the NOTE above"
    width = max(len(c.name) for c in results)
    for c in results:
        mark = "ok  " if c.ok else "MISS"
        print(f"[{mark}] {c.name:<{width}}  {c.detail}")
        if not c.ok:
            print(f"       {'':<{width}}  → costs you: {c.cost}")
    cpu_path = all(c.ok for c in results if c.name in ("compiler (NVRTC)", "disassembler"))
    emulated = sys.platform == "darwin" and next((c.ok for c in results if c.name == "CPU emulator"), False)
    print("\nCPU path (compile, inspect, models, widgets, simulator):",
          "ready" if cpu_path else "without NVRTC on a Mac (see below)" if emulated and not note else "INCOMPLETE")
    if not cpu_path and note:
        print("  (see the NOTE at the top: this is probably the wrong Python)")
    print("GPU path (launch, bench, checks against the reference):",
          "ready" if all(c.ok for c in results if c.name in ("GPU", "CuPy")) else "not available here")
    profiles = next(c.ok for c in results if c.name == "Nsight Compute")
    print("Profiles (tklab.profile):", "measured here" if profiles else "the ones recorded on an H200")
    if note:  # what this Python lacks says nothing of the machine: the workbook's .venv is the one to ask
        print("\nThis machine's path: ask the workbook's own Python (see the NOTE at the top)")
        return 0 if cpu_path else 1
    return 0 if machine_path(results) or cpu_path else 1


def machine_path(results: list[Check]) -> bool:
    """Print the path this machine is on and what each chapter does there; True when that path is complete
    as designed (a machine without NVRTC, such as a Mac, is a path of its own when the CPU emulator works)."""
    from . import where

    emulator = next((c.ok for c in results if c.name == "CPU emulator"), False)
    print()
    try:
        lines = where.table(emulator=emulator)
    except Exception as e:  # noqa: BLE001 - the doctor reports, never raises
        print(f"This machine's path: unknown ({type(e).__name__}: {e})")
        return False
    print("\n".join(lines))
    return where.machine_path() is where.MachinePath.CPU_ONLY and emulator
