"""Run CUDA kernels -- tile library, inline PTX, tensor cores and all -- on the CPU, to check them without a GPU.

Two engines (``engine()``). Where NVRTC is installed (every Linux pip install): the PTX NVRTC builds -- the program a
GPU would run -- is interpreted instruction by instruction (``tklab.emulate.interp``): the learner's code is data,
and every address it computes is checked against the kernel's own buffers; this gives graded verdicts. Without
NVRTC (macOS): the source is compiled as host C++ against a small CUDA shim, with every inline ``asm`` statement
rewritten into calls that emulate its PTX instructions: a second program, whose native code runs in its process,
so it is for practice only. Both run each block's threads as fibers that switch where the hardware makes threads
meet (barriers, warp-wide instructions, waits), with the hardware's fragment layouts (mma.sync, ldmatrix, stmatrix,
movmatrix, cp.async, mbarrier, TMA, wgmma, ...). It is for correctness only: no timing means anything here.

Mistakes come back as exceptions that name the thread, the block and the line: an out-of-bounds global
access (with the argument and element), a shared-memory race (the two threads, the element, read or
write), an asynchronous hazard (a TMA box read before it landed, operands of a pending wgmma group or
TMA store overwritten, a stage released before its wgmma group was waited for, a missing
``fence.proxy.async``), a deadlock (who waits for what), a time limit, an instruction that is not emulated.
Nothing starts clean that does not on a GPU: shared memory, TMA boxes in flight and pending wgmma
accumulators read as NaN, and uninitialised locals (register tiles) hold a garbage pattern.

    import tklab.emulate as emu
    mod = emu.compile(src, arch="sm_90a")           # or tklab.compile(src, arch=..., target="cpu")
    mod["smem_matmul"](grid, block, (A, B, C, M, N, K))   # NumPy arrays, updated in place

Public API: ``compile(...) -> EmuModule``, ``tensor_map(...)``, ``TensorMap``, ``compiler()`` (which
C++ compiler was found), ``describe()`` (for the doctor), ``TMA_ORDERS`` (a launch's ``tma_order=``, see
``tklab.emulate.module``), the errors (``EmulationError``, ``OutOfBounds``, ``SharedRace``, ``AsyncHazard``,
``Deadlock``,
``TimeLimit``, ``NotEmulated``, ``InvalidOperation``, ``EmulationCompileError``).
"""

from __future__ import annotations

from typing import Any

from ..toolchain.compiler import COURSE_ARCH, takes_compile_options
from . import build as _build
from .arguments import TMA_ORDERS, LaunchResult
from .build import EmulationCompileError
from .errors import (
    AssertionFailed,
    AsyncHazard,
    Deadlock,
    EmulationError,
    InvalidAddress,
    InvalidOperation,
    NotEmulated,
    OutOfBounds,
    SharedRace,
    TimeLimit,
)
from .interp.module import PtxKernel, PtxModule
from .module import EmuKernel, EmuModule
from .tensormap import TensorMap, tensor_map
from .toolchain import Compiler, NoCompiler, find

__all__ = ["compile", "engine", "ENGINES", "tensor_map", "TensorMap", "compiler", "describe", "EmuModule", "EmuKernel",
           "PtxModule", "PtxKernel", "LaunchResult",
           "EmulationError", "OutOfBounds", "SharedRace", "Deadlock", "TimeLimit", "NotEmulated", "InvalidOperation",
           "InvalidAddress",
           "AssertionFailed", "AsyncHazard", "EmulationCompileError", "NoCompiler", "LABEL", "TMA_ORDERS"]

#: How results of this target are labelled wherever a verdict is shown.
LABEL = "CPU emulation: correctness only, no timing"


def compiler() -> Compiler:
    """The host C++ compiler the emulator uses (raises ``NoCompiler`` saying what to install)."""
    return find()


def describe() -> str:
    """For ``python -m tklab doctor``: the compiler found, and proof that a kernel runs (raises if not)."""
    import time

    import numpy as np

    cc = find()
    start = time.perf_counter()
    mod = compile('extern "C" __global__ void k(int* x) { x[threadIdx.x] = threadIdx.x * 2; }', name="doctor.cu")
    x = np.zeros(32, np.int32)
    mod["k"](1, 32, (x,))
    if x.tolist() != [2 * i for i in range(32)]:
        raise RuntimeError("the emulator ran a kernel but got a wrong result")
    took = f"{time.perf_counter() - start:.1f} s for a first kernel"
    if engine() == "ptx":
        return (f"the PTX interpreter (runtime built with {cc.description}): CUDA exercises get graded verdicts on the "
                f"CPU, from the PTX NVRTC builds ({took})")
    return (f"{cc.description}: CUDA kernels run on the CPU as host C++ builds of the source, for PRACTICE only (no "
            f"NVRTC here, so no PTX to interpret): tklab grade and nbgrade refuse them ({took})")


ENGINES = ("ptx", "native")


def engine() -> str:
    """How this machine runs CUDA kernels on the CPU: ``"ptx"`` (NVRTC compiles, the interpreter runs the PTX: the
    graded path) or ``"native"`` (no NVRTC, e.g. macOS: the source compiled as host C++, for practice only).
    ``$TKLAB_EMU_ENGINE`` picks one explicitly."""
    import os

    from ..toolchain import locate

    wanted = os.environ.get("TKLAB_EMU_ENGINE", "").strip().lower()
    if wanted in ENGINES:
        return wanted
    return "ptx" if locate.nvrtc_available() else "native"


@takes_compile_options
def compile(source: str, *, arch: str | None = COURSE_ARCH, engine: str | None = None,  # noqa: A001 - as tklab's
            **given: Any) -> EmuModule | PtxModule:
    """Compile CUDA C++ for the CPU emulator; ``arch`` picks what the source sees as ``__CUDA_ARCH__``
    (``sm_90a``: Hopper paths such as wgmma and TMA; ``sm_80``: the others). ``engine``: ``"ptx"`` (NVRTC's PTX,
    interpreted: the default where NVRTC is installed) or ``"native"`` (see ``engine()``). The other keyword
    parameters are NVRTC's compile's (``tklab.toolchain.compiler.compile``); the native build reads ``name``,
    ``options``, ``include_dirs`` and ``name_expressions``."""
    if not isinstance(source, str):
        raise TypeError(f"source must be a str of CUDA C++, not {type(source).__name__}")
    arch = (arch or COURSE_ARCH).strip().lower()
    how = engine or globals()["engine"]()
    if how not in ENGINES:
        raise ValueError(f"engine={how!r}: choose one of {', '.join(ENGINES)}")
    program = given.pop("name", None) or "kernel.cu"
    if how == "ptx":
        from ..toolchain.compiler import CompileError
        from ..toolchain.compiler import compile as nvrtc_compile

        try:
            mod = nvrtc_compile(source, arch=arch, name=program, **given)
        except CompileError as e:
            raise EmulationCompileError(str(e), program) from None
        return PtxModule(mod.ptx, program=program, source=source, arch=arch, options=mod.options,
                         lowered=mod.lowered, key=mod.key)
    options = given.get("options", ())
    built = _build.build(source, arch=arch, name=program, options=options,
                         include_dirs=tuple(given.get("include_dirs", ())),
                         name_expressions=tuple(given.get("name_expressions", ())))
    return EmuModule(built, source=source, arch=arch, options=options)
