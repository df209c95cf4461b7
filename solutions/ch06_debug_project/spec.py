"""ch06 debugging: Y = X W with the tk tile library, W staged in shared memory by cp.async, one bug to find."""

from __future__ import annotations

import numpy as np

from tklab.grading.spec_kit import Dims, Exercise, Launch, TensorCoreWork, UsesSharedMemory, WritesGlobal, uniform
from tklab.run.arrays import bf16_to_float32, to_bf16_bits

D = 64  # the kernel's D: columns of X and Y, the size of W


def _inputs(rng: np.random.Generator, d: Dims) -> dict[str, np.ndarray]:
    return {"X": to_bf16_bits(uniform(rng, (d["M"], D))), "W": to_bf16_bits(uniform(rng, (D, D)))}


def _reference(x: dict[str, np.ndarray], d: Dims) -> dict[str, np.ndarray]:
    return {"Y": bf16_to_float32(x["X"]).astype(np.float64) @ bf16_to_float32(x["W"]).astype(np.float64)}


SPEC = Exercise(
    id="ch06_debug_project",
    title="Debugging: one weight tile for many rows",
    chapter="06",
    solution="ch06_debug_project.cu",
    kernel="tiles_project",
    language="cuda",
    inputs=_inputs,
    outputs=lambda d: {"Y": ((d["M"], D), "float32")},
    reference=_reference,
    rtol=1e-3,
    atol=1e-3,
    launch=lambda d: Launch(grid=(-(-d["M"] // 128),), block=(128,)),
    args=lambda a, d: (a["X"], a["W"], a["Y"], np.int32(d["M"])),
    cases=({"M": 65536}, {"M": 160}, {"M": 32}),
    # Emulated: two blocks, the second with one warp of work (three return early), then one warp alone.
    emu_cases=({"M": 160}, {"M": 32}),
    shapes="M a multiple of 32",
    floors=(TensorCoreWork(lambda d: 2.0 * d["M"] * D * D, "tensor cores (mma.sync)"),),
    static=(WritesGlobal(), UsesSharedMemory()),
)
