"""A CUDA exercise's compile step where NVRTC is missing (macOS; ``TKLAB_NO_NVRTC=1``).

The learner's file is built for the CPU emulator instead -- inside the sandboxed run, never in the checking
process -- so a compile error is still shown on their own lines; the static checks, which read what NVRTC
makes (SASS, registers, spills, compile-time probes), are reported as skipped, by name, and the verdict
carries that caveat: an emulated PASSED is never a bare one.

Public API: ``compile_step(spec, source, shown, res, arch, why) -> None``.
"""

from __future__ import annotations

from typing import Any


def compile_step(spec: Any, source: str, shown: str, res: Any, arch: str, why: str) -> None:
    """Fill ``res`` (a ``CheckResult``) as ``check``'s static step would, with the emulator as the compiler.

    The learner's file is NOT built here: building it for the emulator means compiling and loading host code
    from it, which only ever happens in the sandboxed run (``grading.child``), where a compile error is
    reported as the run's error, on the learner's own lines. Here: whether the emulator works at all (so a
    broken machine is not blamed on the file), and the static checks that need NVRTC, skipped by name."""
    res.arch = arch
    broken = _emulator_broken()
    if broken:
        res.compile_error = (f"{why.split(';')[0]}, and the CPU emulator does not work on this machine, so nothing "
                             f"here can compile CUDA (your file is not to blame): {broken}")
        return
    res.compiled = True
    res.resources = "built for the CPU emulator in the sandboxed run: registers, shared memory and spills need NVRTC"
    names = [getattr(c, "name", type(c).__name__) for c in spec.static]
    res.notes.append(f"{why.split(';')[0]}: {len(names)} static check{'s' if len(names) != 1 else ''} skipped "
                     f"({', '.join(names) or 'none'}); the file is compiled for the CPU emulator inside the "
                     "sandboxed run")
    res.caveat = (f"on the CPU emulator; {len(names)} static check{'s' if len(names) != 1 else ''} skipped: "
                  "they need NVRTC" if names else "on the CPU emulator")


def _emulator_broken() -> str:
    """Why the emulator's own parts (a compiler, its runtime library, its precompiled prelude) cannot be built
    here (on one line), or "" when they can. They come from tklab's sources only, as ``emulate.exercise.prepare``
    builds them for the sandboxed run: no module is built, loaded or cached by the checking process."""
    from ..emulate import build
    from ..emulate.toolchain import find

    try:
        cc = find()
        build.runtime_library(cc)
        build._pch(cc)
    except Exception as e:  # noqa: BLE001 - any failure of the probe is the machine's, not the learner's
        return " ".join(str(e).split())[:300] or type(e).__name__
    return ""
