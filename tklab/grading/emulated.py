"""Checking a CUDA exercise without a GPU: the emulator's side of ``tklab.check``.

Without a GPU, ``tklab.check`` runs a CUDA exercise in its usual child process, on the CPU: the exercise's own
cases, minus those too big to emulate in seconds (the main 1024-sized case of a GEMM, say), on fresh random
inputs, compared element by element with the reference. It says the kernel computes the right thing, nothing
about its speed. A race, an out-of-bounds access or a deadlock fails the run with the emulator's explanation.

Which program runs: the PTX that NVRTC built for sm_90a in the checking process -- the program its static checks
read and a GPU would run -- handed to the child as ``PTX_FILE`` and run there by the PTX interpreter
(``tklab.emulate.interp``). The learner's code is data to it: nothing of theirs runs natively, and every address
their kernel computes is checked against the kernel's own buffers. That is a verdict (mode "emu",
``Evidence.CPU_EMULATION``, labelled ``LABEL``).

Where NVRTC is missing (macOS), there is no PTX: the source is compiled as host C++ against the emulator's shim
(``engine="native"``) in the sandboxed child, for practice only (mode "practice", ``Evidence.CPU_PRACTICE``,
labelled ``PRACTICE_LABEL``): a second program, whose native code runs in the child, so ``tklab grade`` and
``nbgrade`` refuse it.

Public API: ``can_run(spec)``, ``cases(spec)``, ``runnable_cases(spec)``, ``practice_cases(spec)``,
``hazard_cases(spec)``, ``shape(dims)``, ``left_to_gpu(spec)``, ``prepare(spec)`` (parent), ``child(spec, path,
chan, run_cases)`` (child), ``annotate(check_result, outcome, spec)``, ``LABEL``, ``PRACTICE_LABEL``, ``PTX_FILE``,
``TMA_ORDERS``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from math import prod
from pathlib import Path
from typing import Any

from ..toolchain.compiler import COURSE_ARCH

LABEL = "CPU: the sm_90a PTX that NVRTC built, interpreted (correctness only, no timing)"
NUMBA_LABEL = "CPU: the PTX numba compiled, interpreted (correctness only, no timing)"
PRACTICE_LABEL = "CPU practice build (host C++, no NVRTC here): for practice, not a graded verdict"
#: The file in the run's folder holding the PTX the checking process compiled (the program the child runs).
PTX_FILE = "program.ptx"
#: The TMA completion orders a case's ``tma_order`` picks (the emulator's launch option ``tma_order``; 0 is
#: its default, "delayed": every load lands as late as its mbarrier allows).
TMA_ORDERS = ("delayed", "reversed", "in_order")
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
    """The exercise's cases that emulate in seconds (``spec.emu_cases`` when a spec names its own). A case
    with ``tma_order`` runs with TMA loads landing in that order (``TMA_ORDERS``)."""
    own = getattr(spec, "emu_cases", None)
    if own:
        return list(own)
    return [d for d in spec.cases if _work(d) <= MAX_WORK]


def shape_of(dims: dict[str, int]) -> dict[str, int]:
    """``shape``, under the name the child's launch uses (``shape`` is a local there)."""
    return shape(dims)


def shape(dims: dict[str, int]) -> dict[str, int]:
    """A case without how it is emulated (its ``tma_order``): the shape a GPU case would have."""
    return {k: v for k, v in dims.items() if k != "tma_order"}


def hazard_cases(spec: Any) -> list[dict[str, int]]:
    """The small cases a GPU check also emulates, for the hazards timing luck can hide on the GPU: the first
    emulated case, and where the exercise is emulated under several TMA completion orders, the first case of
    another order too (on the H200, chapter 10 without its V wait passed a hazard run under the reversed order
    alone: V happened to land first); [] where the emulator cannot run here."""
    runnable = runnable_cases(spec)
    first = runnable[:1]
    other = [d for d in runnable[1:] if first and d.get("tma_order", 0) != first[0].get("tma_order", 0)]
    return first + other[:1]


def left_to_gpu(spec: Any) -> list[dict[str, int]]:
    """The exercise's GPU cases that no emulated case covers."""
    covered = [shape(d) for d in cases(spec)]
    return [d for d in spec.cases if d not in covered]


def can_run(spec: Any) -> bool:
    """A CUDA exercise (or a numba one, where numba can compile to PTX) with at least one case small enough, and a
    C++ compiler on this machine (the emulator's runtime is built with it)."""
    import os

    if spec.language not in ("cuda", "numba") or not cases(spec) or \
            os.environ.get("TKLAB_NO_EMULATION", "") in ("1", "true", "yes"):
        return False
    if spec.language == "numba":
        from . import numba_ptx

        if not numba_ptx.available():
            return False
    from ..emulate.toolchain import NoCompiler, find

    try:
        find()
    except NoCompiler:
        return False
    return True


def runnable_cases(spec: Any) -> list[dict[str, int]]:
    """The cases of ``spec`` this machine can emulate as a verdict (the PTX interpreter: NVRTC and a C++ compiler
    for the interpreter's runtime); [] when it cannot (the runner's mode then does not apply)."""
    from ..emulate import engine

    if spec.language == "numba":  # its PTX comes from numba's NVVM, not NVRTC
        return cases(spec) if can_run(spec) else []
    return cases(spec) if can_run(spec) and engine() == "ptx" else []


def practice_cases(spec: Any) -> list[dict[str, int]]:
    """The cases the native practice build runs where NVRTC is missing; [] where the interpreter can run them."""
    from ..emulate import engine

    return cases(spec) if spec.language == "cuda" and can_run(spec) and engine() == "native" else []


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


@contextlib.contextmanager
def _cpu_tensor_maps() -> Iterator[None]:
    """Inside the child only: specs that build ``tklab.run.tma`` maps get emulator maps over NumPy arrays."""
    from ..emulate import tensormap
    from ..run import tma

    saved = tma.tensor_map
    tma.tensor_map = tensormap.tensor_map  # type: ignore[assignment]
    try:
        yield
    finally:
        tma.tensor_map = saved  # type: ignore[assignment]


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


def load(spec: Any, path: Path) -> Any:
    """In the child: the module to run. The PTX the checking process handed over (``PTX_FILE`` beside the learner's
    file), interpreted; without it (no NVRTC there) the native practice build of the source."""
    from .. import emulate
    from ..toolchain import includes
    from ..toolchain import locate as cuda_toolchain

    source = path.read_text()
    ptx = path.parent / PTX_FILE
    if ptx.is_file():
        from ..emulate.interp.module import PtxModule

        if spec.language == "numba":  # numba's array arguments, by its calling convention; Python is not CUDA source
            return PtxModule(ptx.read_text(), program=path.name, arch=spec.arch, abi="numba")
        return PtxModule(ptx.read_text(), program=path.name, source=source, arch=ARCH, options=spec.options)
    if spec.language == "numba":
        raise RuntimeError("no PTX was handed over for this numba exercise")
    includes.refuse_outside(source, path.name, own_dir=path.parent,
                            allowed=[cuda_toolchain.tile_library_dir()], search=[path.parent])
    return emulate.compile(source, arch=ARCH, name=path.name, options=spec.options, engine="native")


def child(spec: Any, path: Path, chan: Any, run_cases: Callable[..., bool]) -> None:
    """The runner child's emulated run (``tklab.grading.child``'s "emu", "hazards" and "practice" modes): the
    module (``load``), then the parent's cases through ``run_cases``; emulator warnings (e.g. shared memory read
    before written) go back as "note" frames, and what executed as "facts" (for the concept floors)."""
    import numpy as np

    ptx = (path.parent / PTX_FILE).is_file()
    chan.send("device", name=(NUMBA_LABEL if spec.language == "numba" else LABEL) if ptx else PRACTICE_LABEL)
    mod = load(spec, path)
    kernel = mod[spec.kernel]
    sent: set[str] = set()
    facts: dict[str, int] = {}

    def launch(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        shape = spec.launch(dims)
        with _cpu_tensor_maps():
            args = spec.args(arrays, dims)
        res = kernel(shape.grid, shape.block, args, shared_mem=shape.shared_mem, time_limit=TIME_LIMIT,
                     **_order(kernel, dims))
        _collect(res, facts)
        for floor in getattr(spec, "floors", ()):  # the problem's work at this case, for TensorCoreWork
            count = getattr(floor, "flops", None)
            if callable(count) and getattr(res, "concepts", None):
                facts["problem_flops"] = facts.get("problem_flops", 0) + int(count(shape_of(dims)))
                break
        for w in res.warnings:
            if w not in sent and len(sent) < 3:
                sent.add(w)
                chan.send("note", text=f"emulator: {w}")

    if run_cases(spec, chan, np, launch) and facts:
        chan.send("facts", **facts)


def _order(kernel: Any, dims: dict[str, int]) -> dict[str, Any]:
    """The launch option that makes TMA loads land in the case's order (none for the emulator's default
    order, or where this emulator has no such option)."""
    import inspect

    k = dims.get("tma_order", 0)
    if not k or "tma_order" not in inspect.signature(kernel.__call__).parameters:
        return {}
    return {"tma_order": TMA_ORDERS[k]}


#: What the parent's concept floors may read from a launch (``LaunchResult`` attribute → fact), as maxima.
FACTS = {"wgmma_max_in_flight": "max_wgmma_groups"}


def _collect(res: Any, facts: dict[str, int]) -> None:
    for attr, name in FACTS.items():
        value = getattr(res, attr, None)
        if isinstance(value, int):
            facts[name] = max(facts.get(name, value), value)
    for name, value in (getattr(res, "concepts", None) or {}).items():  # the interpreter's counts: summed
        facts["executed_" + name] = facts.get("executed_" + name, 0) + int(value)
    if getattr(res, "concepts", None):
        facts["interpreted_launches"] = facts.get("interpreted_launches", 0) + 1


def annotate(res: Any, outcome: Any, spec: Any) -> None:
    """Add what the learner should know about an emulated run to a ``CheckResult``: its notes, how many
    cases it covered and which it left to a GPU (so a pass says "PASSED on n of m cases"), and the
    chapter's concept floors judged on what the emulator saw (``spec.floors``)."""
    from .specs import dims_text

    result = getattr(outcome, "result", None) or {}
    res.notes += [str(n) for n in result.get("notes", [])[:3]]
    shapes: list[dict[str, int]] = []
    for d in cases(spec):
        if shape(d) not in shapes:
            shapes.append(shape(d))
    skipped = left_to_gpu(spec)
    res.cases_run, res.cases_total = len(shapes), len(shapes) + len(skipped)
    orders = sorted({TMA_ORDERS[d.get("tma_order", 0)] for d in cases(spec)})
    if len(orders) > 1:
        res.notes.append("TMA loads were made to land in these orders: " + ", ".join(orders))
    if skipped:
        res.notes.append("too big to emulate, left to a GPU: " + "; ".join(dims_text(d) for d in skipped))
    if getattr(outcome, "status", "") == "ok":
        facts = result.get("facts", {})
        for floor in getattr(spec, "floors", ()):
            judged = floor.judge_emulated(facts)
            if judged is not None:
                res.floors.append(judged)
