"""Nsight Compute on chapter-08 GEMM steps (and bench/gemm_wgmma.py's experiments) at one size.

    PYTHONPATH=$PWD python3 bench/probes/gemm_steps_profile.py 5_cluster 5_cluster_s3_c4 [--n 4096]

Prints, per step, what ``tklab.profile`` measured: time, TFLOP/s, tensor pipe busy, the limiter sentence
and the top stall reasons; with ``--json FILE`` also writes them. Used to decide the next step on the
4096³ gap (bench/notes/gemm_wgmma.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import gemm_wgmma  # noqa: E402

import tklab  # noqa: E402
from tklab import course, gemm  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("steps", nargs="+")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    known = dict(gemm.STEPS) | gemm_wgmma.VARIANTS | gemm_wgmma.EXPERIMENTS
    n, out = args.n, {}
    a, b = course.bf16_random((n, n)), course.bf16_random((n, n))
    for name in args.steps:
        import cupy as cp

        c = cp.full((n, n), 0xFFFF, cp.uint16)
        r = tklab.profile(gemm.prepare(a, b, c, step=known[name]), flops=2.0 * n**3, peak="bf16_tensor",
                          label=f"{name} {n}³")
        stalls = ", ".join(f"{st.reason} {st.share:.0%}" for st in r.top_stalls(4))
        print(f"{name}: {r.ms:.3f} ms, {r.tflops:.0f} TFLOP/s, tensor {r.tensor_pct:.0f} %; {r.limiter.sentence}; "
              f"stalls: {stalls}", flush=True)
        out[name] = {"ms": r.ms, "tflops": r.tflops, "tensor_pct": r.tensor_pct, "limiter": r.limiter.sentence,
                     "stalls": {st.reason: st.share for st in r.top_stalls(6)}}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
