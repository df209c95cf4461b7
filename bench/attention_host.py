"""Where the host time of ``tklab.attention`` goes: per-call CPU time of the course's forward and backward against
SDPA's at the tiny GPT's shapes, and a cProfile of the course's calls (GPU, torch).

    python bench/attention_host.py [--batch 32] [--context 256] [--calls 200] [--top 30]

Why: the tiny GPT trains at ~18 ms a step against SDPA's ~11 ms while every kernel of the step takes ~4 ms in both
(bench/results/train_tiny_gpt_*.md): the gap is host work in the attention calls. This bench times that work
alone -- each call's wall and CPU time with the GPU kept ahead (no synchronize inside the timed loop), so the
CPU time is what the Python path costs -- and names the functions that spend it.
Writes ``bench/results/attention_host_<date>_<commit>.md`` (and into $OUT when set).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import io
import os
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tklab import recorded  # noqa: E402

HEADS, HEAD_DIM = 8, 64  # the tiny GPT's attention (bench/train_tiny_gpt.py)


def inputs(batch: int, context: int) -> tuple[Any, Any, Any, Any]:
    """q, k, v as the model makes them (strided views of one [b, t, 3, h, d] tensor) and a dO like the output."""
    import torch

    base = torch.randn(batch, context, 3, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    q, k, v = (base[:, :, i].transpose(1, 2) for i in range(3))
    return q, k, v, torch.randn(batch, HEADS, context, HEAD_DIM, device="cuda", dtype=torch.bfloat16)


def per_call(fn: Callable[[], Any], calls: int) -> dict[str, float]:
    """Mean wall and CPU microseconds per call of ``fn`` (after 10 warm-up calls), and the device catching up."""
    import torch

    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    w1, c1 = time.perf_counter(), time.process_time()
    torch.cuda.synchronize()
    w2 = time.perf_counter()
    return {"wall_us": (w1 - w0) / calls * 1e6, "cpu_us": (c1 - c0) / calls * 1e6,
            "drain_ms": (w2 - w1) * 1e3}


def contenders(batch: int, context: int) -> dict[str, Callable[[], Any]]:
    """name -> one call: the forward alone (no grad), forward + backward through autograd, for ours and SDPA's."""
    import torch

    from tklab.kernels.attention_autograd import attention

    q, k, v, do = inputs(batch, context)
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def fwd(f: Callable[..., Any]) -> Callable[[], Any]:
        def run() -> Any:
            with torch.no_grad():
                return f(q, k, v, is_causal=True) if f is sdpa else f(q, k, v, causal=True)
        return run

    def fwd_bwd(f: Callable[..., Any]) -> Callable[[], Any]:
        def run() -> Any:
            o = f(q, k, v, is_causal=True) if f is sdpa else f(q, k, v, causal=True)
            return torch.autograd.grad(o, (q, k, v), do)
        return run

    return {"course forward": fwd(attention), "sdpa forward": fwd(sdpa),
            "course forward+backward": fwd_bwd(attention), "sdpa forward+backward": fwd_bwd(sdpa)}


def profile_text(fn: Callable[[], Any], calls: int, top: int) -> tuple[str, str]:
    """cProfile of ``calls`` calls: the ``top`` functions by own time and by cumulative time."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    out = []
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).strip_dirs().sort_stats(key).print_stats(top)
        out.append(s.getvalue().split("\n", 4)[-1].strip())  # drop pstats' header lines (a date and a path)
    return out[0], out[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        print("bench/attention_host.py needs an H100/H200 GPU and torch (the course's kernels use TMA and wgmma); "
              f"{'torch is not installed' if torch is None else 'torch sees no CUDA device'} here", file=sys.stderr)
        return 2
    runs = contenders(args.batch, args.context)
    rows = {name: per_call(fn, args.calls) for name, fn in runs.items()}
    by_time, by_cum = profile_text(runs["course forward+backward"], args.calls, args.top)
    today = datetime.date.today().isoformat()
    md = [f"# Host time of the course's attention calls against SDPA's ({today})", "",
          f"Measured on: {torch.cuda.get_device_name()}, commit {recorded.commit()}, {today}; torch "
          f"{torch.__version__}; `python bench/attention_host.py --batch {args.batch} --context {args.context} "
          f"--calls {args.calls}`. Shapes: the tiny GPT's attention ([{args.batch}, {HEADS}, {args.context}, "
          f"{HEAD_DIM}] bf16, causal, strided views of one qkv tensor).", "",
          "Per call, after 10 warm-up calls, nothing synchronised inside the loop: CPU time is the host path's "
          "cost; wall time above it is the host waiting (a full launch queue); drain is the GPU finishing the "
          "queued work after the loop.", "",
          "| call | wall µs / call | CPU µs / call | drain after the loop (ms) |", "|---|---|---|---|"]
    md += [f"| {n} | {r['wall_us']:.0f} | {r['cpu_us']:.0f} | {r['drain_ms']:.1f} |" for n, r in rows.items()]
    from tklab.kernels.attention import LAUNCHES

    md += ["", f"Launches remembered (tklab.run.launch_memo) over the calls above and the profile's: {LAUNCHES.hits} "
           f"hits, {LAUNCHES.misses} misses, {len(LAUNCHES)} entries."]
    md += ["", f"## cProfile of {args.calls} course forward+backward calls, by own time", "", "```", by_time, "```",
           "", "## The same, by cumulative time", "", "```", by_cum, "```", ""]
    stem = f"attention_host_{today}_{recorded.commit()}"
    for folder in [ROOT / "bench" / "results", *([Path(os.environ["OUT"])] if os.environ.get("OUT") else [])]:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{stem}.md").write_text("\n".join(md))
    print("\n".join(md[:14 + len(rows)]))
    print(by_time[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
