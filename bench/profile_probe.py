"""Where the time of notebook 10's Nsight Compute cell goes: each step of ``tklab.profile`` timed apart.

Why: on an H100 (session 15) that notebook outlived 250 s and 390 s with no cell named. This runs the cell's
steps one by one (ncu's metric and section queries, the kernel's build, the recipe written for the child,
ncu's profile of the one launch) and prints how long each took, so the slow one is known, not guessed.

    python3 bench/profile_probe.py [--timeout S]

Prints one line per step; writes nothing. Needs a Hopper GPU, torch and ncu.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=240.0, help="ncu's limit for the profile itself, seconds")
    args = ap.parse_args()
    t0 = time.perf_counter()

    def step(what: str, since: float) -> float:
        now = time.perf_counter()
        print(f"{now - t0:7.1f} s  (+{now - since:6.1f})  {what}", flush=True)
        return now

    t = t0
    import torch

    from tklab import attention, gpu
    from tklab.profile import ncu, recipe
    t = step(f"imports; GPU {gpu.name()}", t)
    exe = ncu.find_ncu()
    if exe is None:
        raise SystemExit("no ncu on this machine")
    t = step(f"ncu {exe}, version {ncu.version(exe)}", t)
    metrics = ncu.available_metrics(exe, gpu.name())
    t = step(f"ncu --query-metrics: {len(metrics)} metrics (cached after the first time)", t)
    sections = ncu.available_sections(exe)
    t = step(f"ncu --list-sections: {sorted(sections)}", t)
    q, k, v = (torch.randn(2, 16, 8192, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, lse = torch.empty_like(q), torch.empty(2, 16, 8192, device="cuda")
    run = attention.prepare(q, k, v, o, lse, kernel="hopper")
    torch.cuda.synchronize()
    t = step(f"the chapter's kernel built and prepared ({run.kernel.name[:40]}...)", t)
    folder = Path(tempfile.mkdtemp(prefix="tklab-probe-"))
    rec = recipe.capture(run, folder, warmup=2)
    size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
    t = step(f"recipe written for the profiled process: {size:.0f} MiB", t)
    wanted = ncu.metrics_to_request(metrics)
    try:
        csv_text, out, used = ncu.run_profile(exe, folder, kernel=rec.kernel, warmup=2, metrics=wanted,
                                              sections=sections, timeout=args.timeout)
        t = step(f"ncu profile: {len(used)} metrics asked, {len(csv_text)} bytes of CSV", t)
        print("\n".join(out.strip().splitlines()[-6:]))
    except Exception as e:  # noqa: BLE001 - the point is to see what happened, whatever it was
        t = step(f"ncu profile failed: {type(e).__name__}: {str(e)[:1500]}", t)


if __name__ == "__main__":
    main()
