"""Which cases each way of running an exercise runs (no GPU here: the emulator's smaller cases; beside a GPU run, the
hazard cases; a trace, the first). Pure selection from the spec and this machine's tools; nothing runs.

Public API: ``cases(spec)``, ``runnable_cases(spec)``, ``practice_cases(spec)``, ``hazard_cases(spec)``,
``traced_cases(spec)``, ``left_to_gpu(spec)``, ``can_run(spec)``, ``shape(dims)``, ``without_gpu(spec)``, ``MAX_WORK``.
"""

from __future__ import annotations

from math import prod
from typing import Any

#: Cases bigger than this (M·N·K, or the product of a case's sizes) are skipped under emulation.
MAX_WORK = 1 << 24


def _work(dims: dict[str, int]) -> int:
    """A case's work, roughly: M·N·K for a matmul, B·H·N²·d for attention (every query meets every key)."""
    if {"B", "H", "N"} <= set(dims) and "M" not in dims:
        return dims["B"] * dims["H"] * dims["N"] ** 2 * dims.get("D", 64)
    return prod(v for k, v in dims.items() if k in ("M", "N", "K")) or 1


def cases(spec: Any) -> list[dict[str, int]]:
    """The exercise's cases that emulate in seconds (``spec.emu_cases`` when a spec names its own). A case
    with ``tma_order`` runs with TMA loads landing in that order (``tklab.grading.spec_kit.TMA_ORDERS``)."""
    own = getattr(spec, "emu_cases", None)
    if own:
        return list(own)
    return [d for d in spec.cases if _work(d) <= MAX_WORK]


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


def traced_cases(spec: Any) -> list[dict[str, int]]:
    """The first case the emulator runs for this exercise (``tklab.trace`` of an exercise), or none."""
    return runnable_cases(spec)[:1]


def without_gpu(spec: Any) -> str:
    """How its correctness is checked on a machine without a GPU (the index's column): ``CPU`` (a drill),
    ``simulator`` (numba), ``emulator`` (its PTX interpreted on the CPU; needs a C++ compiler), or ``static checks
    only``."""
    if spec.language == "python":
        return "CPU"
    if spec.language == "numba":
        return "simulator" if spec.sim_cases else "static checks only"
    return "emulator" if cases(spec) else "static checks only"
