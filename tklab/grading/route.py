"""Where a check runs an exercise on this machine, and the sentence that says why.

A CUDA exercise runs on this GPU when the GPU can run what the exercise needs (``spec.arch``: ``sm_75``
for the fp32 chapters, ``sm_80`` for mma.sync and cp.async, ``sm_90a`` for wgmma and TMA) and NVRTC is
there to compile it; otherwise on the CPU emulator, and the report says which of the two was missing. The
static checks compile for this GPU when it runs the exercise, else for the exercise's own arch (the
course's Hopper target when there is no GPU), so a Hopper exercise checked on an A100 still gets its
wgmma checked in the SASS.

Public API: ``Route``, ``route(spec)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..build import toolchain
from ..build.compiler import COURSE_ARCH
from ..run import gpu


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
    missing = toolchain.nvrtc_missing() if spec.language == "cuda" else None
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

