"""Where a check runs an exercise on this machine, and the sentence that says why.

A CUDA exercise runs on this GPU when the GPU can run what the exercise needs (``spec.arch``: ``sm_75``
for the fp32 chapters, ``sm_80`` for mma.sync and cp.async, ``sm_90a`` for wgmma and TMA) and NVRTC is
there to compile it; otherwise on the CPU emulator, and the report says which of the two was missing. The
static checks compile for this GPU when it runs the exercise, else for the exercise's own arch (the
course's Hopper target when there is no GPU), so a Hopper exercise checked on an A100 still gets its
wgmma checked in the SASS.

Without a GPU, a verdict comes from interpreting the program the compiler built (NVRTC's PTX, numba's PTX).
Where that compiler is missing, a check runs a practice build instead (the CUDA source as host C++, numba's
simulator): fine for a learner's practice, never a grade, so ``practice_only`` says which exercises a class
could not be graded on here, and ``grade``/``nbgrade`` refuse.

Public API: ``Route``, ``route(spec)``, ``practice_only(specs) -> str | None``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..run import gpu
from ..toolchain import locate
from ..toolchain.compiler import COURSE_ARCH


@dataclass(frozen=True)
class Route:
    """``on_gpu``: the run may use this GPU; ``static_arch``: what the static checks compile for; ``why``:
    why the GPU is not used although there is one (empty otherwise); ``nvrtc``: None, or why NVRTC is missing."""

    on_gpu: bool
    static_arch: str
    why: str = ""
    nvrtc: str | None = None


def route(spec: Any) -> Route:
    """Where ``spec`` is checked on this machine (see the module docstring)."""
    missing = locate.nvrtc_missing() if spec.language == "cuda" else None
    if not gpu.available():
        return Route(False, COURSE_ARCH, nvrtc=missing)  # the course's target: what the recordings were made on
    reason = gpu.why_not(spec.arch)
    if reason is not None:
        return Route(False, spec.arch, f"{reason}, so {spec.id} runs on the CPU emulator instead (it needs "
                     f"{spec.arch})", missing)
    if missing is not None:
        return Route(False, gpu.arch(), f"{missing.split(';')[0]}, so {spec.id} runs on the CPU emulator "
                     "instead of this GPU", missing)
    return Route(True, gpu.arch())


def practice_only(exercises: list[Any]) -> str | None:
    """Why grading ``exercises`` here would give practice runs instead of verdicts (None: it would not): no GPU,
    and the compiler whose program the interpreter runs is missing (NVRTC for CUDA; numba's NVVM for numba)."""
    if gpu.available():
        return None
    cuda = [e.id for e in exercises if e.language == "cuda"]
    numba = [e.id for e in exercises if e.language == "numba"]
    missing = []
    if cuda and locate.nvrtc_missing() is not None:
        missing.append(f"NVRTC ({locate.nvrtc_missing()}), so {', '.join(cuda[:3])}{' …' if len(cuda) > 3 else ''} "
                       "would run as host C++ builds of the source, not the program a GPU runs")
    if numba:
        from .numba_ptx import available

        if not available():
            missing.append(f"numba's NVVM, so {', '.join(numba)} would run in numba's simulator, in the process that "
                           "sends the outputs")
    if not missing:
        return None
    return ("refusing to grade: this machine has no GPU and lacks " + "; and ".join(missing) + ": practice runs, "
            "not verdicts. Grade on Linux with the workbook's pip install (it brings NVRTC and NVVM), or on a GPU")
