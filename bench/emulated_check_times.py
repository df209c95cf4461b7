"""How long a check without a GPU takes: ``python -m tklab check <solution> --no-bench`` on the CPU emulator,
for every CUDA exercise of chapters 05-10, with a cold compile cache (what a learner's first check costs:
NVRTC for the static checks, the emulator's C++ build, the emulated cases) and a warm one (a re-check).

A benchmark, not a test (issue 23: chapter 10's check must stay under 60 s on a 2-core machine). Writes
bench/results/emulated_check_times_<date>_<commit>.{json,md}.

Usage: PYTHONPATH=. python bench/emulated_check_times.py [--exercises ch05_mma ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tklab.grading import specs  # noqa: E402
from tklab.recorded import commit  # noqa: E402

EXERCISES = ("ch05_mma", "ch06_tiles", "ch07_tma_ring", "ch08_wgmma", "ch09_flash", "ch10_flash")


def check_once(exercise: str, cache: Path) -> dict:
    spec = specs.get(exercise)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TKLAB_CACHE_DIR": str(cache)}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "tklab", "check", str(ROOT / spec.solution), "--exercise", exercise,
                          "--no-bench", "--json", "--seed", "1"], capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - t0
    try:
        report = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        report = {"verdict": "no report", "summary": out.stderr[-500:]}
    return {"seconds": round(seconds, 1), "verdict": report.get("verdict"), "established": report.get("established"),
            "run": report.get("run_message", "")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exercises", nargs="*", default=list(EXERCISES))
    args = ap.parse_args()
    rows = []
    for e in args.exercises:
        with tempfile.TemporaryDirectory(prefix="tklab-bench-cache-") as tmp:
            cold = check_once(e, Path(tmp))
            warm = check_once(e, Path(tmp))
        rows.append({"exercise": e, "cold_s": cold["seconds"], "warm_s": warm["seconds"], "verdict": warm["verdict"],
                     "established": warm["established"], "run": warm["run"]})
        print(f"{e:<15} cold {cold['seconds']:6.1f} s  warm {warm['seconds']:6.1f} s  {warm['verdict']}", flush=True)
    stamp = f"{datetime.date.today().isoformat()}_{commit()}"
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "commit": commit(),
            "cpus": os.cpu_count(), "machine": "no GPU; CPU emulator",
            "note": "shared machine: other work ran on the same cores, so these are upper bounds"}
    out = ROOT / "bench" / "results" / f"emulated_check_times_{stamp}"
    out.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    lines = [f"# Emulated check times ({meta['date']}, commit {meta['commit']}, {meta['cpus']} CPUs)", "",
             "`python -m tklab check <solution> --no-bench` without a GPU; cold = empty compile cache (NVRTC, the "
             "emulator's runtime library and precompiled prelude, the emulated module: a learner's first check); "
             "warm = the same check again. "
             f"{meta['note']}.",
             "", "| exercise | cold (s) | warm (s) | verdict |", "|---|---|---|---|"]
    lines += [f"| {r['exercise']} | {r['cold_s']} | {r['warm_s']} | {r['verdict']} |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}.json/.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
