"""ch08 design exercise: the warp-specialised GEMM of chapter 08's picture — the register split, the
producer's loop over K-slices and the consumers' loop with their hand-back — before the chapter shows it."""

from __future__ import annotations

from tklab.grading.spec_kit import (
    BF16_MATMUL,
    Exercise,
    Launch,
    NoSerializedWgmma,
    NoSpills,
    Probe,
    SassHas,
    TensorCoreWork,
    UsesSharedMemory,
    WritesGlobal,
    matmul_flops,
    tma_matmul_args,
)

BM, BN, BK, CONSUMERS, STAGES = 128, 256, 64, 2, 4
# The kernel exports gemm_shared_bytes; the sandboxed run cannot compile the solution to read it, so it is
# computed here (tests/test_design_exercises.py holds the two equal).
SHARED = STAGES * (CONSUMERS * 64 * BK + BK * BN) * 2 + 1024
THREADS = (CONSUMERS + 1) * 128

_SPLIT_PROBE = """
template <class> struct tklab_split;
template <int P, int C, int N, int M> struct tklab_split<tk::warpgroup::register_split<P, C, N, M>> {
    static constexpr int producer = P, consumer = C;
};
__device__ int tklab_probe_producer = tklab_split<split>::producer;
__device__ int tklab_probe_consumer = tklab_split<split>::consumer;
"""


def _split_judge(v: dict[str, int]) -> list[str]:
    p, c = v.get("producer", 0), v.get("consumer", 0)
    notes = []
    if p > 56:
        notes.append(f"the producer keeps {p} registers: one lane issuing TMA needs few (24-56), and every "
                     "register it keeps is one the consumers' accumulators cannot have")
    if c < 200:
        notes.append(f"the consumers get {c} registers: each holds a 64 x 256 fp32 accumulator slice (128 "
                     "registers a thread) plus addresses; give them what the producer gives up (200 or more)")
    return notes or [f"ok: producer {p}, consumers {c} registers a thread"]


# Small ones first (the CPU emulation runs those): 5 K-slices through 4 stages (the ring wraps); 2 tiles
# down M with 2 slices; 2 tiles along N with one slice. Then the GPU's sizes: many tiles and laps.
CASES = ({"M": 128, "N": 256, "K": 320}, {"M": 256, "N": 256, "K": 128}, {"M": 128, "N": 512, "K": 64},
         {"M": 1024, "N": 1024, "K": 1024}, {"M": 384, "N": 768, "K": 640})

SPEC = Exercise(
    id="ch08_warp_specialized",
    title="The warp-specialised GEMM: register split, producer loop, consumers' loop and hand-back",
    chapter="08",
    design=True,
    untouched=("register split", "the producer keeps 168 registers"),
    solution="ch08_warp_specialized.cu",
    kernel="gemm",
    language="cuda",
    **BF16_MATMUL,
    launch=lambda d: Launch(grid=(d["M"] // BM * (d["N"] // BN),), block=(THREADS,), shared_mem=SHARED),
    args=tma_matmul_args((64, BK), (BK, BN)),  # each consumer's 64-row half of A, a slice of B
    cases=CASES,
    shapes="M a multiple of 128, N of 256, K of 64",
    options=("-DC_TYPE=float",),
    floors=(TensorCoreWork(matmul_flops),),
    static=(
        WritesGlobal(),
        UsesSharedMemory(),
        SassHas(r"UTMALDG(\..*)?", "TMA loads (UTMALDG)", "the producer loads each consumer's half of A and "
                "the slice of B with tma::load_async", min_count=2, name="TMA loads"),
        SassHas(r"HGMMA(\..*)?", "wgmma instructions (HGMMA)", "each consumer multiplies its half of A by B "
                "with warpgroup::mma_AB: 4 HGMMA per 64-deep slice", min_count=4, name="tensor cores used (wgmma)"),
        Probe(_SPLIT_PROBE, _split_judge, name="register split"),
        NoSerializedWgmma(),
        NoSpills(),
    ),
    notes=("graded on correctness only: chapter 08 times this kernel as its step 2",),
    arch="sm_90a",
)
