"""ch07 debug exercise: a TMA ring copy whose consumers keep their slot and lap by hand (one bug planted)."""

from __future__ import annotations

from tklab.grading.spec_kit import COPY, Exercise, NoSpills, SassHas, WritesGlobal, ring_launch, tma_copy_args
from tklab.kernels.tma_copy import TILE_COLS, TILE_ROWS

STAGES = 2  # the exercise file's default (-DSTAGES=...): the launch's shared memory follows it

# 64 x 64 on one block: one tile, the ring never wraps (the bug hides); 300 x 200 on 2 blocks: 20 tiles, 10 per
# block, so a 2-stage ring wraps 4 times; 100 x 68 on 1 block: ragged tiles, 4 laps. Then what only a GPU runs.
CASES = ({"M": 300, "N": 200, "blocks": 2}, {"M": 64, "N": 64}, {"M": 100, "N": 68, "blocks": 1},
         {"M": 4100, "N": 4100}, {"M": 8191, "N": 2052})

SPEC = Exercise(
    id="ch07_debug_lap",
    title="Debug: a TMA ring that passes a small matrix and fails a large one",
    chapter="07",
    solution="ch07_debug_lap.cu",
    kernel="ring_lap",
    language="cuda",
    **COPY,
    launch=ring_launch(STAGES),
    args=tma_copy_args((TILE_ROWS, TILE_COLS)),
    cases=CASES,
    shapes="any M; N a multiple of 4 (TMA needs 16-byte row strides)",
    static=(
        WritesGlobal(),
        SassHas(r"UTMALDG(\..*)?", "TMA loads (UTMALDG)", "keep the producer's tma::load_async", name="TMA load"),
        NoSpills(),
    ),
    notes=("graded on correctness only: chapter 07's ch07_tma_ring measures the ring's speed",),
    arch="sm_90a",
)
