"""ch02 debugging: a row vector times a matrix, x staged in shared memory a slice at a time (one bug to find)."""

from __future__ import annotations

import numpy as np

from tklab.grading.spec_kit import Dims, Exercise, Launch, SassHas, UsesSharedMemory, WritesGlobal, uniform

TILE = 128  # the kernel's TILE: threads a block, entries of x a slice


def _inputs(rng: np.random.Generator, d: Dims) -> dict[str, np.ndarray]:
    return {"x": uniform(rng, (d["K"],)), "A": uniform(rng, (d["K"], d["N"]))}


def _reference(v: dict[str, np.ndarray], d: Dims) -> dict[str, np.ndarray]:
    return {"y": v["x"].astype(np.float64) @ v["A"].astype(np.float64)}


SPEC = Exercise(
    id="ch02_debug_vecmat",
    title="Debugging: a vector times a matrix through shared memory",
    chapter="02",
    arch="sm_75",  # fp32 only: runs on every GPU the course supports
    solution="ch02_debug_vecmat.cu",
    kernel="vecmat",
    language="cuda",
    inputs=_inputs,
    outputs=lambda d: {"y": ((d["N"],), "float32")},
    reference=_reference,
    launch=lambda d: Launch(grid=(-(-d["N"] // TILE),), block=(TILE,)),
    args=lambda a, d: (a["x"], a["A"], a["y"], np.int32(d["K"]), np.int32(d["N"])),
    cases=({"K": 4096, "N": 8192}, {"K": 300, "N": 200}, {"K": 1, "N": 1}),
    # Emulated: several slices of x (K > TILE, a ragged last one) over two blocks, the second one ragged.
    emu_cases=({"K": 300, "N": 200}, {"K": 1, "N": 1}),
    shapes="any K, N",
    static=(
        WritesGlobal(),
        UsesSharedMemory(),
        SassHas(r"LDS(\..*)?", "loads from shared memory (LDS)", "read the entries of x from the staged slice",
                name="x read from shared memory"),
    ),
)
