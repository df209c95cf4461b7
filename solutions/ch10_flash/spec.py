"""ch10: the consumer's key loop of chapter 10's Hopper FlashAttention (TMA, wgmma, ping-pong)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tklab.grading import kit_attention as attn
from tklab.grading.spec_kit import (
    Arrays,
    Bench,
    Dims,
    Exercise,
    NoSpills,
    SassHas,
    StaticResult,
    TakesTurns,
    TensorCoreWork,
    WgmmaOverlap,
    WritesGlobal,
)
from tklab.kernels import attention

BUILD = attention.build("hopper", 128)
#: The speed floor on a GPU: the learner's kernel at least this fraction of the reference solution's speed, both
#: timed in the same check (B=2, H=16, N=8192; the reference in a child of its own, before and after). On the H200 the
#: loop without the S_j / P·V_{j-1} overlap ran as fast as the reference (the ping-pong between two consumers hides
#: what the in-warpgroup overlap would; bench/results/planted_mistakes_gpu_*_speed.md), so no ratio
#: grades the overlap: what executed does (WgmmaOverlap, on the interpreter beside every check, and the SASS gate
#: among the static checks); this ratio only catches a kernel grossly slower than the reference.
OVERLAP_RATIO = 0.85


@dataclass(frozen=True)
class SoftmaxUnderPV:
    """In the SASS, most of the key loop's exponentials (MUFU.EX2) are issued while a wgmma group is in flight,
    between the wait for S_j and the wait for P V_{j-1} (``tklab.toolchain.overlap``): the softmax runs while the
    tensor cores still compute P V, which is what the overlapped schedules are for. The source's order is not
    enough: ptxas may move the wait for P V above the exponentials."""

    name: str = "softmax under P·V (SASS)"
    min_share: float = 0.5

    def run(self, ctx: Any) -> StaticResult:
        from tklab.toolchain import overlap

        o = overlap.softmax_under_pv(ctx.kernel.sass)
        if o.loop and o.share >= self.min_share:
            return StaticResult(self.name, True, str(o))
        if not o.loop:
            return StaticResult(self.name, False, f"{o}: the loop over key blocks 1, 2, ... issues S_j and "
                                "P V_{j-1} and computes block j's softmax while P V still runs")
        if not o.waits_for_one:
            return StaticResult(self.name, False, f"{o}: every product is waited for before the softmax (no wait "
                                "in the key loop leaves P V_{j-1} running: in SASS, WARPGROUP.DEPBAR.LE gsb0, 0x1 "
                                "with two groups in flight), so the tensor cores idle while the exponentials run. "
                                "Issue S_j and P V_{j-1} back to back, wait for S_j alone, compute block j's "
                                "softmax, and only then wait for P V")
        # What is wrong and why ptxas did it; the remedy is the hint ladder's (the question rung, then the recipe).
        return StaticResult(self.name, False, f"{o}: the wait for P V_{{j-1}} comes before the softmax, so the "
                            "exponentials do not run while the tensor cores compute P V; the two take turns. The "
                            "SASS is what runs, not the source's order: the exponentials touch only registers, so "
                            "ptxas may schedule them on either side of a wait, and a stage handed back between the "
                            "two waits lets it move the wait for P V above them (tklab.toolchain.overlap.outline "
                            "of your kernel's SASS shows the order)")


def args(a: Arrays, d: Dims) -> tuple[Any, ...]:
    return (*attn.hopper_maps(a, BUILD), a["LSE"], d["H"], d["N"], 1 / math.sqrt(BUILD.head_dim), d["causal"])


sdpa_cudnn = attn.sdpa_baseline("cudnn")  # chapter 10's yardstick


SPEC = Exercise(
    id="ch10_flash",
    title="Hopper FlashAttention: the consumer's key loop",
    chapter="10",
    untouched=("wgmma used", "only 19 warpgroup tensor-core instructions"),
    solution="ch10_flash.cu",
    kernel="flash_fwd",
    language="cuda",
    inputs=attn.inputs(BUILD.head_dim),
    outputs=attn.outputs(BUILD.head_dim),
    reference=attn.reference,
    launch=attn.launch(BUILD),
    args=args,
    cases=attn.CASES,
    # Emulated: N = 400 causal first (the GPU check's hazard case: 4 query blocks, up to 3 key blocks (BC keys each)
    # through 2 stages, so the ring wraps; the diagonal; a tail of 48), with the TMA loads landing in reverse
    # order, then in the emulator's default order (as late as each mbarrier allows); rising scores over 3 key
    # blocks (a tail of 48); the small and ragged shapes.
    emu_cases=({"B": 1, "H": 1, "N": 400, "causal": 1, "tma_order": 1}, {"B": 1, "H": 1, "N": 400, "causal": 1},
               {"B": 1, "H": 1, "N": 400, "causal": 0, "rising": 1}, {"B": 2, "H": 1, "N": 77, "causal": 0},
               {"B": 1, "H": 1, "N": 1, "causal": 1}, {"B": 1, "H": 2, "N": 256, "causal": 1},
               {"B": 1, "H": 2, "N": 1000, "causal": 1}),
    # Judged on what executed (the interpreter): exponentials under a pending P·V, products inside the turns, the
    # tensor cores doing the products; on a GPU also the speed against the reference, in the same check.
    floors=(WgmmaOverlap(min_groups=2, min_reference_ratio=OVERLAP_RATIO), TakesTurns(),
            TensorCoreWork(attn.flops(BUILD.head_dim),
                           counts="the emulated cases' attention FLOPs (4 b h n^2 d; a causal case counts only the "
                           "half its mask keeps)",
                           beyond="the products cover whole blocks: a causal run also multiplies the masked half "
                           "of each block on the diagonal, and any run the rows and keys past the sequence's end, "
                           "then discards them, so more than 100 % is expected, most of all under a causal mask")),
    shapes="any sequence length, causal or not; d = 128; Q, K, V as [batch, heads, seq, d] bf16",
    rtol=2e-2,
    atol=2e-2,
    by_output={"O": attn.O_TOLERANCE},
    arch="sm_90a",
    options=BUILD.options,
    static=(
        WritesGlobal(),
        # The hints state the goal, never the calls (they are the exercise's answer; the hint ladder has them).
        SassHas(r"HGMMA(\..*)?", "warpgroup tensor-core instructions (HGMMA)",
                "every step of the key loop puts both of its products on the tensor cores, block j's scores "
                "and the previous block's P V (the prologue issues S_0 alone, the last step P V alone)",
                min_count=24, name="wgmma used"),
        SassHas(r"MUFU\.EX2", "fast exponentials (MUFU.EX2)",
                "every step of the key loop computes block j's softmax, as the prologue does for block 0",
                min_count=64, name="exponentials"),
        attn.NO_SERIALIZED_WGMMA,
        SoftmaxUnderPV(),
        NoSpills(),
    ),
    bench=Bench(dims={"B": 2, "H": 16, "N": 8192, "causal": 0}, baseline=sdpa_cudnn,
                baseline_name="SDPA cuDNN", output="O", target=0.64, flops=attn.flops(BUILD.head_dim),
                expect=attn.expect_output, rtol=2e-2, atol=2e-2,
                # the reference (ping-pong) vs SDPA cuDNN at this size, three rounds on the H200
                # (bench/results/flash_fwd_bench_*.md), and 0.805, the check's own timing while it still packed
                # the arguments on every timed call (bench/results/exercises_*.json); re-measure with the prepared
                # launch
                measured=(1.00, 1.05, 0.805)),
)
