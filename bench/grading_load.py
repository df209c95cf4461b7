"""Many students checking at once on one grading node: every verdict right, nothing lost, latency percentiles.

    python bench/grading_load.py                        # 16 concurrent checks: 12 of ch01, 4 of ch02
    python bench/grading_load.py --checks 4 --cuda-checks 0 --out /tmp/x   # what tests/test_grade_load.py runs

Each check is what ``python -m tklab check`` and ``grade`` run for one file (``grade._check_in_subprocess``:
the checker in its own process, the learner's code sandboxed, a wall-clock limit for the whole tree), all
started together from one thread each, as students pressing "check" at the same moment on a JupyterHub
node would. Without a GPU, ch01 runs in numba's CUDA simulator and ch02 (a small CUDA exercise) in the CPU
emulation; on a GPU both run there. The files are those of ``bench/grading_rate.py``'s synthetic class
(a solution, the untouched exercise, a file that does not compile; each file unique, so no compiled module
is shared), and every check's verdict is compared with what its kind of file must get.

The compile cache starts empty (``--warm-cache`` keeps the user's), so concurrent checks also race to build
the same one-time pieces, and the run shows they do so without losing or corrupting anything.

Writes ``grading_load_<date>_<commit>.{json,md}`` into ``--out`` (default ``bench/results/``): the device,
the load, the latency of each check (p50, p90, max, from its start to its verdict), the wall time of the
whole burst and of one check alone (``--no-alone`` skips it). Exit 1 when a verdict is wrong or missing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from grading_rate import _commit, _device, build_class, expected  # noqa: E402

from tklab import grade, specs  # noqa: E402

CPU_EXERCISE, CUDA_EXERCISE = "ch01_naive_matmul", "ch02_smem_tiling"


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by the nearest-rank rule: a value that was measured."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _submissions(root: Path, checks: int, cuda_checks: int) -> list[tuple[str, str, Path, str]]:
    """(student, exercise, file, kind) for each check: ``checks - cuda_checks`` of ch01, ``cuda_checks`` of ch02."""
    out = []
    for ex, n in ((CPU_EXERCISE, checks - cuda_checks), (CUDA_EXERCISE, cuda_checks)):
        if n <= 0:
            continue
        kinds = build_class(root / ex, n, [ex])
        out += [(s, ex, root / ex / s / specs.get(ex).filename, kind) for s, kind in kinds.items()]
    return out


def _one(ex: str, path: Path, start: threading.Barrier | None, timeout: float) -> tuple[dict, float]:
    if start is not None:
        start.wait()
    t = time.monotonic()
    d = grade._check_in_subprocess(ex, path, timeout=timeout, run=True, bench=False)
    return d, time.monotonic() - t


def run(checks: int, cuda_checks: int, *, timeout: float, alone: bool, warm_cache: bool) -> dict[str, Any]:
    device, on_gpu = _device()
    with tempfile.TemporaryDirectory(prefix="tklab-grading-load-") as tmp:
        work = Path(tmp)
        if not warm_cache:
            os.environ["TKLAB_CACHE_DIR"] = str(work / "tklab-cache")
        subs = _submissions(work / "class", checks, cuda_checks)
        alone_s = None
        if alone:  # one check of ch01 by itself, for scale (a file of its own, so nothing is cached for the burst)
            solo = _submissions(work / "solo", 1, 0)[0]
            alone_s = _one(solo[1], solo[2], None, timeout)[1]
        load_before = os.getloadavg()
        barrier = threading.Barrier(len(subs))
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(subs)) as pool:
            futures = [pool.submit(_one, ex, path, barrier, timeout) for _, ex, path, _ in subs]
            results = [f.result() for f in futures]
        wall = time.monotonic() - t0
    rows, wrong = [], []
    for (student, ex, _, kind), (d, seconds) in zip(subs, results, strict=True):
        row = grade._row(student, ex, d)
        ok = expected(kind, row, on_gpu)
        rows.append({"student": student, "exercise": ex, "kind": kind, "seconds": round(seconds, 2),
                     "compiled": row.compiled, "correct": row.correct, "established": row.established,
                     "as_expected": ok})
        if not ok:
            wrong.append(f"{student} {ex} ({kind}): compiled={row.compiled} correct={row.correct}: {row.message[:300]}")
    latencies = [r["seconds"] for r in rows]
    per_exercise = {ex: {"checks": len(ls), "p50_s": percentile(ls, 50), "max_s": max(ls)}
                    for ex in dict.fromkeys(r["exercise"] for r in rows)
                    for ls in [[r["seconds"] for r in rows if r["exercise"] == ex]]}
    return {
        "date": datetime.date.today().isoformat(), "commit": _commit(), "device": device, "cores": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before], "checks": len(rows), "concurrent": len(subs),
        "results_returned": len(results), "verdicts_as_expected": f"{len(rows) - len(wrong)}/{len(rows)}",
        "unexpected": wrong, "p50_s": percentile(latencies, 50), "p90_s": percentile(latencies, 90),
        "max_s": max(latencies), "mean_s": round(statistics.mean(latencies), 2), "wall_s": round(wall, 2),
        "alone_s": None if alone_s is None else round(alone_s, 2), "per_exercise": per_exercise,
        "cache": "the user's" if warm_cache else "empty at the start", "rows": rows,
    }


def markdown(r: dict[str, Any]) -> str:
    lines = [f"# Grading under load: {r['concurrent']} checks at once ({r['date']}, commit {r['commit']})", "",
             f"Device: {r['device']}; load average before the burst {r['load_average_before']} (a machine shared "
             f"with other work); compile cache {r['cache']}. Written by `bench/grading_load.py`.", "",
             f"- verdicts as expected: **{r['verdicts_as_expected']}**, results returned {r['results_returned']} of "
             f"{r['checks']}" + ("" if not r["unexpected"] else f"; unexpected: {'; '.join(r['unexpected'])}"),
             f"- latency of a check (its start to its verdict): p50 {r['p50_s']:.1f} s, p90 {r['p90_s']:.1f} s, "
             f"max {r['max_s']:.1f} s (mean {r['mean_s']:.1f} s)",
             f"- the whole burst: {r['wall_s']:.1f} s"
             + (f"; one ch01 check alone, just before: {r['alone_s']:.1f} s" if r["alone_s"] is not None else ""),
             "", "| exercise | checks | p50 (s) | max (s) |", "|---|---|---|---|"]
    lines += [f"| {ex} | {v['checks']} | {v['p50_s']:.1f} | {v['max_s']:.1f} |" for ex, v in r["per_exercise"].items()]
    lines += ["", "| student | exercise | kind | compiled | correct | established | seconds |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {x['student']} | {x['exercise']} | {x['kind']} | {x['compiled']} | {x['correct']} | "
              f"{x['established']} | {x['seconds']:.1f} |" for x in r["rows"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checks", type=int, default=16, help="checks started at once (default 16)")
    ap.add_argument("--cuda-checks", type=int, default=4, help="how many of them are of the CUDA exercise ch02")
    ap.add_argument("--timeout", type=float, default=300.0, help="each check's run limit, seconds")
    ap.add_argument("--no-alone", action="store_true", help="skip timing one check alone first")
    ap.add_argument("--warm-cache", action="store_true", help="use the user's compile cache instead of an empty one")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    if not 0 <= args.cuda_checks <= args.checks or args.checks < 1:
        ap.error("--checks must be >= 1 and 0 <= --cuda-checks <= --checks")
    r = run(args.checks, args.cuda_checks, timeout=args.timeout, alone=not args.no_alone, warm_cache=args.warm_cache)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"grading_load_{r['date']}_{r['commit']}"
    stem.with_suffix(".json").write_text(json.dumps(r, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(r))
    print(markdown(r))
    print(f"wrote {stem}.md and .json")
    return 0 if not r["unexpected"] and r["results_returned"] == r["checks"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
