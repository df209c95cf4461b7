"""Checking a CUDA exercise without a GPU: the emulator's side of ``tklab.check``.

Without a GPU, ``tklab.check`` runs a CUDA exercise in its usual child process, but on the CPU
emulator: the exercise's own cases, minus those too big to emulate in seconds (the main 1024-sized case
of a GEMM, say), on fresh random inputs, compared element by element with the reference. The verdict is
real and labelled ``LABEL``: it says the kernel computes the right thing, nothing about its speed. A
race, an out-of-bounds access or a deadlock fails the run with the emulator's explanation.

It plugs into ``tklab.grading.child`` as the mode "emu" (``Evidence.CPU_EMULATION``), used when no GPU is there.

Where what runs: the learner's file is host C++ here, so it is compiled (``emulate.build``: time and memory
limits, includes and calls confined) and loaded only in the sandboxed child (``child``). The checking
process builds nothing of the learner's: ``prepare`` gives the child the emulator's own trusted parts (its
runtime and precompiled prelude) to copy into the run's folder; the shared cache is never written from the
sandbox, and no module the child built is ever used by anyone else.

Public API: ``can_run(spec)``, ``cases(spec)``, ``runnable_cases(spec)``, ``prepare(spec)`` (parent),
``child(spec, path, chan, run_cases)`` (child), ``annotate(check_result, outcome, spec)``, ``LABEL``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from math import prod
from pathlib import Path
from typing import Any

from ..build.compiler import COURSE_ARCH

LABEL = "CPU emulation: correctness only, no timing"
#: Cases bigger than this (M·N·K, or the product of a case's sizes) are skipped under emulation.
MAX_WORK = 1 << 24
TIME_LIMIT = 40.0  # seconds per launch: under the check's own process time limit, so the message is ours
ARCH = COURSE_ARCH  # what the kernel sees as __CUDA_ARCH__: the course's target, Hopper


def _work(dims: dict[str, int]) -> int:
    """A case's work, roughly: M·N·K for a matmul, B·H·N²·d for attention (every query meets every key)."""
    if {"B", "H", "N"} <= set(dims) and "M" not in dims:
        return dims["B"] * dims["H"] * dims["N"] ** 2 * dims.get("D", 64)
    return prod(v for k, v in dims.items() if k in ("M", "N", "K")) or 1


def cases(spec: Any) -> list[dict[str, int]]:
    """The exercise's cases that emulate in seconds (``spec.emu_cases`` when a spec names its own)."""
    own = getattr(spec, "emu_cases", None)
    if own:
        return list(own)
    return [d for d in spec.cases if _work(d) <= MAX_WORK]


def can_run(spec: Any) -> bool:
    """A CUDA exercise with at least one case small enough, and a C++ compiler on this machine."""
    import os

    if spec.language != "cuda" or not cases(spec) or os.environ.get("TKLAB_NO_EMULATION", "") in ("1", "true", "yes"):
        return False
    from .toolchain import NoCompiler, find

    try:
        find()
    except NoCompiler:
        return False
    return True


def runnable_cases(spec: Any) -> list[dict[str, int]]:
    """The cases of ``spec`` this machine can emulate; [] when it cannot (the runner's mode then does not apply)."""
    return cases(spec) if can_run(spec) else []


def prepare(spec: Any) -> list[Path]:
    """In the checking (parent) process: build the emulator's own parts (its runtime library and the
    precompiled CUDA prelude, from tklab's sources only: no learner code) into the shared cache, and return
    them, for the runner to copy into the run's own cache folder. The learner's module is compiled and
    loaded in the sandboxed child only (``child``): its host code (a constructor, say) never runs here, and
    nothing the child builds goes back into the shared cache. A failure is left to the child to report."""
    from .build import _pch, runtime_library
    from .toolchain import find

    try:
        cc = find()
        return [runtime_library(cc), _pch(cc)[0]]
    except Exception:  # noqa: BLE001 - the child builds them itself (slower) and reports what fails
        return []


@contextlib.contextmanager
def _cpu_tensor_maps() -> Iterator[None]:
    """Inside the child only: specs that build ``tklab.run.tma`` maps get emulator maps over NumPy arrays."""
    from ..run import tma
    from . import tensormap

    saved = tma.tensor_map
    tma.tensor_map = tensormap.tensor_map  # type: ignore[assignment]
    try:
        yield
    finally:
        tma.tensor_map = saved  # type: ignore[assignment]


def child(spec: Any, path: Path, chan: Any, run_cases: Callable[..., bool]) -> None:
    """The runner child's emulated run (``tklab.grading.child``'s "emu" mode): compile for the CPU, then the
    parent's cases through ``run_cases``; emulator warnings (e.g. shared memory read before written) go
    back as "note" frames."""
    import numpy as np

    from .. import emulate
    from ..build import includes
    from ..build import toolchain as cuda_toolchain

    chan.send("device", name=LABEL)
    source = path.read_text()
    includes.refuse_outside(source, path.name, own_dir=path.parent,
                            allowed=[cuda_toolchain.tile_library_dir()], search=[path.parent])
    mod = emulate.compile(source, arch=ARCH, name=path.name, options=spec.options)
    kernel = mod[spec.kernel]
    sent: set[str] = set()

    def launch(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        shape = spec.launch(dims)
        with _cpu_tensor_maps():
            args = spec.args(arrays, dims)
        res = kernel(shape.grid, shape.block, args, shared_mem=shape.shared_mem, time_limit=TIME_LIMIT)
        for w in res.warnings:
            if w not in sent and len(sent) < 3:
                sent.add(w)
                chan.send("note", text=f"emulator: {w}")

    run_cases(spec, chan, np, launch)


def annotate(res: Any, outcome: Any, spec: Any) -> None:
    """Add what the learner should know about an emulated run to a ``CheckResult``."""
    result = getattr(outcome, "result", None) or {}
    res.notes += [str(n) for n in result.get("notes", [])[:3]]
    small = cases(spec)
    skipped = [d for d in spec.cases if d not in small]
    if skipped:
        from ..grading.specs import dims_text

        res.notes.append("too big to emulate, left to a GPU: " + "; ".join(dims_text(d) for d in skipped))
