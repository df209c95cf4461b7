"""ch07 design exercise: the TMA ring's protocol from bare mbarriers — the barriers' counts, the producer's
empty wait with its parity, the expected bytes and the load, and the consumers' hand-back."""

from __future__ import annotations

from tklab.grading.spec_kit import COPY, Exercise, NoSpills, SassHas, WritesGlobal, ring_launch, tma_copy_args
from tklab.kernels.tma_copy import TILE_COLS, TILE_ROWS

STAGES = 2  # the exercise file's default (-DSTAGES=...)

# 300 x 200 on 2 blocks: 20 tiles, 10 per block, so a 2-stage ring wraps 5 times (every stage, both
# parities, over and over); 100 x 68 on 1 block: ragged tiles; 1 x 4. Then what only a GPU runs (too big
# for the CPU emulator): one block per SM, many laps each, ragged in both directions.
CASES = ({"M": 300, "N": 200, "blocks": 2}, {"M": 100, "N": 68, "blocks": 1}, {"M": 1, "N": 4},
         {"M": 4100, "N": 4100}, {"M": 8191, "N": 2052})

SPEC = Exercise(
    id="ch07_ring_protocol",
    title="The TMA ring from bare mbarriers: counts, the producer's empty wait, bytes, load, the consumers' wait, "
          "hand-back",
    chapter="07",
    design=True,
    untouched=("TMA load", "no TMA loads (UTMALDG)"),
    solution="ch07_ring_protocol.cu",
    kernel="ring_protocol",
    language="cuda",
    **COPY,
    launch=ring_launch(STAGES),  # the tile, the threads (a producer warp, 4 consumer warps) and the ring of ch07's copy
    args=tma_copy_args((TILE_ROWS, TILE_COLS)),
    cases=CASES,
    shapes="any M; N a multiple of 4 (TMA needs 16-byte row strides)",
    static=(
        WritesGlobal(),
        SassHas(r"UTMALDG(\..*)?", "TMA loads (UTMALDG)", "the producer starts each stage's copy with "
                "tma::load_async(...)", name="TMA load"),
        SassHas(r"SYNCS\.PHASECHK(\..*)?", "mbarrier waits (SYNCS.PHASECHK)", "the producer waits for an empty "
                "stage before it refills it", min_count=2, name="mbarrier waits"),
        NoSpills(),
    ),
    notes=("graded on correctness only: chapter 07's ch07_tma_ring measures the ring's speed",),
    arch="sm_90a",
)
