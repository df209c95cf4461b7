"""ch07 design exercise: the TMA ring's protocol from bare mbarriers — the barriers' counts, the producer's
empty wait with its parity, the expected bytes and the load, and the consumers' hand-back."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..spec_kit import Arrays, Dims, Exercise, Launch, NoSpills, SassHas, WritesGlobal, tensor_map, uniform
from .ch07_tma_ring import _sms

STAGES = 2  # the exercise file's default (-DSTAGES=...)
ROWS, COLS = 64, 64  # one tile: the tensor map's box
THREADS = 32 * 5  # the producer warp and 4 consumer warps


def _launch(d: Dims) -> Launch:
    """One block per SM, or ``blocks`` of them when a case asks for fewer (so a small matrix still gives
    each block many tiles: the ring wraps and both parities are used)."""
    tiles = -(-d["M"] // ROWS) * -(-d["N"] // COLS)
    blocks = min(tiles, d.get("blocks") or _sms())
    return Launch(grid=(blocks,), block=(THREADS,), shared_mem=STAGES * ROWS * COLS * 4 + 1024)


def _args(a: Arrays, d: Dims) -> tuple[Any, ...]:
    src_map = tensor_map(a["src"], (ROWS, COLS), swizzle=0)
    return (src_map, a["dst"], np.int32(d["M"]), np.int32(d["N"]))


# 300 x 200 on 2 blocks: 20 tiles, 10 per block, so a 2-stage ring wraps 5 times (every stage, both
# parities, over and over); 100 x 68 on 1 block: ragged tiles; 1 x 4. Then what only a GPU runs (too big
# for the CPU emulator): one block per SM, many laps each, ragged in both directions.
CASES = ({"M": 300, "N": 200, "blocks": 2}, {"M": 100, "N": 68, "blocks": 1}, {"M": 1, "N": 4},
         {"M": 4100, "N": 4100}, {"M": 8191, "N": 2052})

SPEC = Exercise(
    id="ch07_ring_protocol",
    title="The TMA ring from bare mbarriers: counts, the producer's empty wait, bytes, load, hand-back",
    chapter="07",
    design=True,
    untouched=("TMA load", "no TMA loads (UTMALDG)"),
    solution="solutions/ch07_ring_protocol.cu",
    kernel="ring_protocol",
    language="cuda",
    inputs=lambda rng, d: {"src": uniform(rng, (d["M"], d["N"]))},
    outputs=lambda d: {"dst": ((d["M"], d["N"]), "float32")},
    reference=lambda x, d: {"dst": x["src"]},
    launch=_launch,
    args=_args,
    cases=CASES,
    shapes="any M; N a multiple of 4 (TMA needs 16-byte row strides)",
    rtol=0.0,
    atol=0.0,
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
