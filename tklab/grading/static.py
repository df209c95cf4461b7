"""The check's static stage: the learner's file refused or compiled, and the exercise's static checks run on what
the compiler made of it. No GPU needed, nothing of the learner's runs.

CUDA: an ``#include`` outside the tile library, CUDA's headers and the learner's folder is refused
(``tklab.toolchain.includes``), and so is a conditional, ``#define``, ``#pragma`` or ``#include`` the exercise's
template does not have (``directives``); then NVRTC compiles it (in a child with limits: ``bounded_compile``), so
errors are shown on the learner's own numbered lines. numba and drills: a syntax check, and a file that does more
than import numba, numpy and math, set constants and define functions is refused (``hygiene``). Then each
``spec.static`` check reads the result: writes its output, uses shared memory, no spills, the instruction the
chapter is about in the SASS, a conflict-free layout ...

Public API: ``run(spec, source, shown, res, arch, own_dir) -> module | None``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from .spec_kit import Exercise, StaticContext, StaticResult
from .verdict import CheckResult


def run(spec: Exercise, source: str, shown: str, res: CheckResult, arch: str, own_dir: Path) -> Any:
    """The static stage for any exercise: the compiled module for CUDA (None when it does not compile, and for
    numba and drills); ``res.compiled`` says whether it got through."""
    if spec.language == "cuda":
        return _cuda(spec, source, shown, res, arch, own_dir)
    _python(spec, source, shown, res)
    return None


def _cuda(spec: Exercise, source: str, shown: str, res: CheckResult, arch: str, own_dir: Path) -> Any:
    """Compile and run the static checks; returns the module (None when it does not compile)."""
    from ..toolchain import includes, locate
    from ..toolchain.compiler import CompileError
    from ..toolchain.compiler import compile as tk_compile
    from ..toolchain.locate import NvrtcUnavailable
    from . import directives, without_nvrtc

    res.arch = arch
    try:  # before NVRTC reads anything: it runs here, as the grader
        includes.refuse_outside(source, shown, own_dir=own_dir, allowed=[locate.tile_library_dir(),
                                *map(Path, locate.include_dirs())],
                                search=[Path.cwd(), locate.tile_library_dir(), *map(Path, locate.include_dirs())])
    except includes.IncludeRefused as e:
        res.compile_error = str(e)
        return None
    if added := directives.added(spec, source, shown):  # one preprocessor view on every path (directives.py)
        res.compile_error = "\n".join(added)
        return None
    try:
        mod = tk_compile(source, arch=arch, name=shown, options=spec.options)
    except NvrtcUnavailable as e:  # macOS: the emulator compiles it; the static checks are skipped, by name
        without_nvrtc.compile_step(spec, source, shown, res, arch, str(e))
        return None
    except CompileError as e:
        res.compile_error = str(e)
        return None
    except ValueError as e:  # e.g. a NUL byte: refused before NVRTC sees it
        res.compile_error = str(e)
        return None
    res.compiled = True
    try:
        kernel = mod[spec.kernel]
    except KeyError:
        res.static.append(StaticResult("entry kernel", False, f"no kernel named {spec.kernel} (kernels: "
                                       f"{', '.join(mod.kernels) or 'none'}); keep the name the exercise gives"))
        return mod
    res.resources = (f"{kernel.registers} registers, {kernel.shared_bytes} B static shared memory, "
                     f"{kernel.spill_bytes} B spilled")
    ctx = StaticContext(spec=spec, source=source, program=shown, arch=arch, module=mod, kernel=kernel)
    for chk in spec.static:
        res.static.append(chk.run(ctx))
    return mod


def _python(spec: Exercise, source: str, shown: str, res: CheckResult) -> None:
    from . import hygiene

    try:
        ast.parse(source, shown)
    except SyntaxError as e:
        res.compile_error = f"{shown}:{e.lineno}: error: {e.msg}\n  {(e.text or '').rstrip()}"
        return
    refused = hygiene.problems(source, shown, plain_functions=spec.language == "python")
    if refused:  # nothing of it runs: the file does what an exercise file may not (tklab.grading.hygiene)
        res.compile_error = "\n".join(f"{p} (refused before running)" for p in refused)
        return
    res.compiled = True
    ctx = StaticContext(spec=spec, source=source, program=shown)
    for chk in spec.static:
        res.static.append(chk.run(ctx))
    res.notes += [r for r in (remark(source) for remark in spec.remarks) if r]
