"""ch07: a copy through a ring of TMA-filled shared stages (producer: expect + load; consumers: wait)."""

from __future__ import annotations

from tklab.grading.spec_kit import (
    COPY,
    Bench,
    Exercise,
    NoSpills,
    SassHas,
    WritesGlobal,
    copy_baseline,
    ring_launch,
    tma_copy_args,
)
from tklab.kernels.tma_copy import TILE_COLS, TILE_ROWS

STAGES = 2  # the exercise file's default (-DSTAGES=...): the launch's shared memory follows it

SPEC = Exercise(
    id="ch07_tma_ring",
    title="A copy through a ring of TMA stages: the producer's load, the consumers' wait",
    chapter="07",
    untouched=("TMA load", "no TMA loads (UTMALDG)"),
    solution="ch07_tma_ring.cu",
    kernel="ring_copy",
    language="cuda",
    **COPY,
    launch=ring_launch(STAGES),
    args=tma_copy_args((TILE_ROWS, TILE_COLS)),
    # 1024²: 256 tiles over the blocks; 100 x 68: ragged tiles (TMA zero-fill, bounded stores); 3000 x 1000:
    # many tiles per block, so the ring wraps and every phase parity is used many times.
    cases=({"M": 1024, "N": 1024}, {"M": 100, "N": 68}, {"M": 1, "N": 4}, {"M": 3000, "N": 1000}),
    # Emulated: every case (the ring wraps at 3000 x 1000: ~6 tiles per block), the wrapping one first (the
    # GPU check's hazard case) with the TMA loads landing in reverse order.
    emu_cases=({"M": 3000, "N": 1000, "tma_order": 1}, {"M": 1024, "N": 1024}, {"M": 100, "N": 68},
               {"M": 1, "N": 4}, {"M": 3000, "N": 1000}),
    shapes="any M; N a multiple of 4 (TMA needs 16-byte row strides)",
    static=(
        WritesGlobal(),
        SassHas(r"UTMALDG(\..*)?", "TMA loads (UTMALDG)", "start the stage's copy with tma::load_async(...)",
                name="TMA load"),
        SassHas(r"SYNCS\.PHASECHK(\..*)?", "mbarrier waits (SYNCS.PHASECHK)", "wait on the stage's barriers "
                "with wait(barrier, parity)", name="mbarrier waits"),
        NoSpills(),
    ),
    # The reference's ratio measured by bench/ch07_ch08_gpu.py on the H200 (bench/results/ch07_ch08_*.md); the
    # target sits at most TARGET_MARGIN x below it.
    bench=Bench(dims={"M": 16384, "N": 8192}, baseline=copy_baseline("src"),
                baseline_name="device-to-device copy of the same bytes", output="dst", target=0.6, measured=(0.757,),
                bytes=lambda d: 2.0 * 4 * d["M"] * d["N"],
                expect=lambda a, d: a["src"], rtol=0.0, atol=0.0),
    arch="sm_90a",
)
