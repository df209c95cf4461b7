"""tklab: write, inspect and time Hopper GPU kernels from a notebook.

The short tour::

    import tklab
    mod = tklab.compile(src, arch="sm_90a")   # NVRTC, cached; the tile library is on the include path
    mod                                        # registers, shared memory, spills, instruction mix
    print(mod["gemm"].sass)                    # what the compiler made of it (no GPU needed)
    mod["gemm"](grid, block, (a, b, c, n))     # launch on CuPy arrays / torch tensors (GPU)
    tklab.bench(lambda: mod["gemm"](...), flops=2 * n**3)
    tklab.profile(mod["gemm"].prepare(...), flops=2 * n**3)   # Nsight Compute: what limits it (GPU + ncu)

Submodules are imported on first use, so ``import tklab`` stays fast and works without a GPU. Modules are
grouped in subpackages by what they do (``toolchain/``, ``run/``, ``models/``, ``course/``, ``grading/``,
``profile/``, ``emulate/``, ``widgets/``: docs/ARCHITECTURE.md); ``from tklab import gpu`` still names one.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from . import preflight  # noqa: F401 - first: without numpy, it says which Python to use (no bare traceback)
from .grading.check import check  # eager, like bench: tklab.check stays the function
from .grading.hints import hint  # tklab.hint("ch10_flash"): the exercise's next hint
from .profile import profile  # eager, like bench: tklab.profile stays the function (package: tklab/profile/)
from .run.bench import BenchResult, bench  # eager: binds tklab.bench to the function, not the submodule
from .toolchain.compiler import CompileError, Kernel, Module, takes_compile_options
from .trace import trace as _trace_source  # eager: the package tklab/trace/ is imported before the function below

__version__ = "0.1.0"

#: The package is grouped by what its modules do (docs/ARCHITECTURE.md): toolchain/ (compile and inspect), run/
#: (the GPU: launch, time), models/, course/ (the chapters' helpers), grading/ (checking learners' files),
#: and profile/, emulate/, widgets/. The notebooks, and anyone, still name a module by its own name:
#: ``from tklab import gpu, sass, banks`` gives the module from its home (the same object, not a copy).
_HOMES = {name: f"{group}.{name}" for group, names in {
    "toolchain": ("locate", "compiler", "cache", "sass", "overlap", "numba_compat"),
    "run": ("gpu", "launch", "tma", "ceilings", "arrays", "baselines", "signature", "limits"),
    "models": ("banks", "layouts", "occupancy", "schedules"),
    "kernels": ("gemm", "attention", "attention_bwd", "attention_autograd", "tma_copy"),
    "course": ("report", "nbrefresh", "doctor"),
    "grading": ("verdict", "runner", "child", "channel", "judge", "sandbox", "grade", "grade_shards", "nbgrade",
                "exercises", "specs", "hints", "drills"),
}.items() for name in names}
_LAZY_NAMES = {"LaunchError": ("run.launch", "LaunchError"), "ProfileResult": ("profile", "ProfileResult"),
               "ProfileUnavailable": ("profile", "ProfileUnavailable")}

__all__ = ["BenchResult", "CompileError", "Kernel", "Module", "compile", "bench", "check", "hint", "LaunchError",
           "ProfileResult", "ProfileUnavailable", "profile", "trace", "load_ipython_extension"]


def __getattr__(name: str) -> Any:
    if name in _LAZY_NAMES:
        module, attr = _LAZY_NAMES[name]
        return getattr(importlib.import_module(f".{module}", __name__), attr)
    if name in _HOMES:
        module = importlib.import_module(f".{_HOMES[name]}", __name__)
        globals()[name] = module  # asked once: later lookups find it directly
        return module
    raise AttributeError(f"module 'tklab' has no attribute {name!r}")


@takes_compile_options
def compile(source: str, *, target: str = "gpu", **given: Any) -> Module:  # noqa: A001 - the name learners expect
    """CUDA C++ source -> a module of kernels. ``target="gpu"``: NVRTC (``tklab.toolchain.compiler.compile``:
    cached, inspectable, launchable on a GPU). ``target="cpu"``: the CPU emulator's build (``tklab.emulate``):
    kernels run on NumPy arrays without a GPU, for correctness only. The other keyword parameters (``arch``,
    ``name``, ``options``, ``include_dirs``, ``name_expressions``, ``line_offset``) are the compiler's, for both."""
    if target == "cpu":
        from . import emulate

        return emulate.compile(source, **given)  # type: ignore[return-value]
    if target != "gpu":
        raise ValueError(f"target must be 'gpu' or 'cpu' (the emulator), not {target!r}")
    from .toolchain import compiler

    return compiler.compile(source, **given)


def trace(exercise_or_source: str | Path, *, path: str | Path | None = None, blocks: int = 0,
          timeline_blocks: int = 2, tma_latency: int = 600, wgmma_cost: int = 1, timeout: float = 120.0,
          **launch: Any) -> Any:
    """The learner's kernel as the CPU emulator saw it (no GPU needed): per shared/global instruction its
    wavefronts or sectors, per warp its waits, per loop its instruction mix (``tklab.trace.model.Trace``).

    An exercise id (``"ch04_swizzle"``): the learner's file in ``exercises/`` (or ``path``) runs in the sandboxed
    child, the exercise's first emulated case, traced (``tklab.grading.traced``). CUDA source or a ``.cu`` path with
    ``kernel``, ``grid``, ``block`` and ``args``: traced in this process (``tklab.trace.run.trace``)."""
    from .grading import traced
    from .trace.collect import Options

    opts = dict(blocks=blocks, timeline_blocks=timeline_blocks, tma_latency=tma_latency, wgmma_cost=wgmma_cost)
    if traced.is_exercise(exercise_or_source):
        return traced.trace_exercise(str(exercise_or_source), path=path, opts=Options(**opts), timeout=timeout)
    return _trace_source(exercise_or_source, **opts, **launch)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext tklab`` registers the ``%%tk`` cell magic."""
    from .magic import register

    register(ipython)
