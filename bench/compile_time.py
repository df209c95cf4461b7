"""Cold and warm compile time of a real kernel that includes the tile library.

Cold: a fresh cache folder (NVRTC parses tk.cuh and all it includes, then ptxas runs). Warm: the same
call again (a hash of the source and headers plus a file read). Goal: cold < 2 s, warm < 50 ms.

Usage: ``python bench/compile_time.py [--source FILE] [--arch sm_90a] [--reps 5]``; writes
``bench/results/compile_time_<date>.md`` with the machine, commit and date. Runs on any machine (no GPU).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCES = ["solutions/gemm_mma_tiles.cu", "solutions/gemm_wgmma.cu",
                   "tests/kernels/tile_ops.cu"]  # the last: ~350 lines, 59 kernels


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def measure(path: Path, arch: str, reps: int) -> dict[str, float]:
    import tklab

    source = path.read_text()
    cold, warm = [], []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as d:
            os.environ["TKLAB_CACHE_DIR"] = d
            t = time.perf_counter()
            mod = tklab.compile(source, arch=arch, name=path.name)
            cold.append(time.perf_counter() - t)
            assert not mod.cached
            for _ in range(5):
                t = time.perf_counter()
                again = tklab.compile(source, arch=arch, name=path.name)
                warm.append(time.perf_counter() - t)
                assert again.cached
    return {"lines": len(source.splitlines()), "cold_s": statistics.median(cold),
            "warm_ms": 1e3 * statistics.median(warm)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", action="append")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    from tklab import recorded

    sources = [ROOT / s for s in (args.source or DEFAULT_SOURCES) if (ROOT / s).exists()]
    rows = []
    for path in sources:
        r = measure(path, args.arch, args.reps)
        rows.append((path.relative_to(ROOT), r))
        print(f"{path.name}: {r['lines']} lines, cold {r['cold_s']:.2f} s, warm {r['warm_ms']:.1f} ms")
    today = dt.date.today().isoformat()
    lines = [f"# Compile time, {today}", "",
             f"- machine: {cpu_name()}, {os.cpu_count()} cores (no GPU needed)",
             f"- NVRTC {recorded.nvrtc()}, arch {args.arch}, commit {recorded.commit()}",
             f"- median of {args.reps} cold compiles (fresh cache) and {5 * args.reps} warm ones", "",
             "| source | lines (+ ~2000 lines of tile-library headers) | cold (s) | warm (ms) | goal |",
             "|---|---|---|---|---|"]
    for path, r in rows:
        ok = "met" if r["cold_s"] < 2 and r["warm_ms"] < 50 else "missed"
        lines.append(f"| `{path}` | {r['lines']} | {r['cold_s']:.2f} | {r['warm_ms']:.1f} | "
                     f"cold < 2 s, warm < 50 ms: {ok} |")
    out = ROOT / "bench" / "results" / f"compile_time_{today}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
