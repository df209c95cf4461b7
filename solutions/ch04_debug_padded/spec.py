"""ch04 debugging: a transpose through a padded shared tile (33-word rows), one bug to find."""

from __future__ import annotations

import numpy as np

from tklab.grading.spec_kit import Dims, Exercise, Launch, SassHas, UsesSharedMemory, WritesGlobal, uniform


def _inputs(rng: np.random.Generator, d: Dims) -> dict[str, np.ndarray]:
    return {"inp": uniform(rng, (d["M"], d["N"]))}


SPEC = Exercise(
    id="ch04_debug_padded",
    title="Debugging: a padded transpose",
    chapter="04",
    arch="sm_75",  # fp32 only: runs on every GPU the course supports
    solution="ch04_debug_padded.cu",
    kernel="transpose_padded",
    language="cuda",
    inputs=_inputs,
    outputs=lambda d: {"out": ((d["N"], d["M"]), "float32")},
    reference=lambda x, d: {"out": np.ascontiguousarray(x["inp"].T)},
    launch=lambda d: Launch(grid=((d["N"] + 31) // 32, (d["M"] + 31) // 32), block=(32, 8)),
    args=lambda a, d: (a["inp"], a["out"], np.int32(d["M"]), np.int32(d["N"])),
    cases=({"M": 1024, "N": 2048}, {"M": 67, "N": 45}, {"M": 1, "N": 33}),
    emu_cases=({"M": 67, "N": 45}, {"M": 1, "N": 33}),
    shapes="any M, N",
    rtol=0.0,
    atol=0.0,
    static=(
        WritesGlobal(),
        UsesSharedMemory(),
        SassHas(r"LDS(\..*)?", "loads from shared memory (LDS)", "write `out` from the tile",
                name="out written from the tile"),
    ),
)
