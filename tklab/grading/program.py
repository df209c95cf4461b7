"""The program a check judges, made in the checking process before anything runs: the PTX the emulated run
interprets (NVRTC's build of the learner's file, the one a GPU would run), and the emulator's own parts (its
runtime with the PTX interpreter) built from tklab's sources only, for the runner to hand to the child.

A numba exercise's PTX comes from numba's NVVM in a child of its own (``numba_ptx``; the check asks the runner).

Public API: ``ptx_for(spec, source, name, module)``, ``prepare(spec)``, ``ARCH``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..toolchain.compiler import COURSE_ARCH

ARCH = COURSE_ARCH  # what the kernel sees as __CUDA_ARCH__: the course's target, Hopper


def ptx_for(spec: Any, source: str, name: str, module: Any = None) -> str | None:
    """In the checking process: the PTX the emulated run interprets -- ``module``'s (the static checks' build)
    when it was built for ``ARCH``, else the source built for ``ARCH`` here; None without NVRTC (or when the
    source does not compile: the static checks say why)."""
    if module is not None and getattr(module, "arch", None) == ARCH and getattr(module, "ptx", None):
        return str(module.ptx)
    from ..toolchain import locate

    if not locate.nvrtc_available():
        return None
    from ..toolchain.compiler import compile as nvrtc_compile

    try:
        return nvrtc_compile(source, arch=ARCH, name=name, options=spec.options).ptx
    except Exception:  # noqa: BLE001 - a compile error is the static checks' to report
        return None


def prepare(spec: Any) -> list[Path]:
    """In the checking (parent) process: build the emulator's own parts (its runtime library, with the PTX
    interpreter, and for the native practice build the precompiled CUDA prelude, from tklab's sources only: no
    learner code) into the shared cache, and return them, for the runner to copy into the run's own cache folder.
    Nothing the child builds goes back into the shared cache. A failure is left to the child to report."""
    from ..emulate import engine
    from ..emulate.build import _pch, runtime_library
    from ..emulate.toolchain import find

    try:
        cc = find()
        parts = [runtime_library(cc)]
        if engine() == "native":
            parts.append(_pch(cc)[0])
        return parts
    except Exception:  # noqa: BLE001 - the child builds them itself (slower) and reports what fails
        return []
