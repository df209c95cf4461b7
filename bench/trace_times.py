"""How long ``tklab.trace`` takes on this machine, and what trace mode costs when it is off.

    python bench/trace_times.py [--repeat 3] [--base REF] [--out bench/results]

For chapter 04's transpose, chapter 07's TMA ring and chapter 10's FlashAttention forward (each exercise's first
emulated case, the one ``tklab.trace(exercise)`` traces), the median seconds of: the emulated launch with trace
mode off; the same launch traced (``tklab.trace.collect``); the analysis (``tklab.trace.analyze``, addr2line
included). With ``--base REF`` the launch with trace mode off is also timed on REF's tree (extracted with
``git archive``): what the hooks cost when off. The two trees are measured in alternating rounds (one process
per tree and round), so a change of the machine's load hits both. The build is not timed (warm cache).
Writes ``trace_times_<date>_<commit>.md`` into ``--out`` and prints it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = ("ch04_swizzle", "ch07_tma_ring", "ch10_flash")

CHILD = r"""
import json, statistics, sys, time
from pathlib import Path
import numpy as np
from tklab.grading import specs
from tklab.grading import emulated as exercise
import tklab.emulate as emu
names, repeat, trace = json.loads(sys.argv[1])
for name in names:
    spec = specs.get(name)
    dims = exercise.runnable_cases(spec)[0]
    kernel = emu.compile(open(spec.solution).read(), arch="sm_90a", name=spec.filename,
                         options=spec.options)[spec.kernel]
    shape = spec.launch(dims)
    order = {"tma_order": exercise.TMA_ORDERS[dims["tma_order"]]} if dims.get("tma_order") else {}

    def args():
        arrays = dict(spec.inputs(np.random.default_rng(3), dims))
        for out, (s, dtype) in spec.outputs(dims).items():
            arrays[out] = np.zeros(s, dtype=dtype)
        with exercise._cpu_tensor_maps():
            return spec.args(arrays, dims)

    row = {"exercise": name, "dims": {k: v for k, v in dims.items()}, "grid": list(shape.grid),
           "block": list(shape.block)}
    off = []
    for _ in range(repeat):
        a = args()
        t = time.perf_counter()
        kernel(shape.grid, shape.block, a, shared_mem=shape.shared_mem, time_limit=600, workers=1, **order)
        off.append(time.perf_counter() - t)
    row["off_s"] = statistics.median(off)
    if trace:
        from tklab.trace.analyze import analyze
        from tklab.trace.collect import collect
        on, ana = [], []
        for _ in range(repeat):
            a = args()
            t = time.perf_counter()
            raw = collect(kernel, shape.grid, shape.block, a, shared_mem=shape.shared_mem, time_limit=600, **order)
            on.append(time.perf_counter() - t)
            t = time.perf_counter()
            tr = analyze(raw, kernel=spec.kernel, source=open(spec.solution).read(), source_name=spec.filename,
                         grid=tuple(shape.grid) + (1,) * (3 - len(tuple(shape.grid))),
                         block=tuple(shape.block) + (1,) * (3 - len(tuple(shape.block))),
                         library=Path(kernel.module.built.path))
            ana.append(time.perf_counter() - t)
        row.update(on_s=statistics.median(on), analyze_s=statistics.median(ana), json_kb=len(tr.to_json()) / 1024,
                   events=len(tr.events), blocks_traced=tr.blocks_traced)
    print(json.dumps(row), flush=True)
"""


def _measure(tree: Path, repeat: int, trace: bool, cache: str) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(tree), "TKLAB_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps([list(EXERCISES), repeat, trace])], cwd=tree,
                         env=env, capture_output=True, text=True, timeout=3600)
    if out.returncode:
        raise SystemExit(f"measuring {tree} failed:\n{out.stderr[-3000:]}")
    return [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]


def _commit(ref: str = "HEAD") -> str:
    return subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--base", help="a git ref whose emulator is timed with trace mode off, for comparison")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    cache = os.environ.get("TKLAB_CACHE_DIR") or tempfile.mkdtemp(prefix="tklab-trace-times-")
    import statistics

    rounds: list[list[dict]] = []
    base_rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="tklab-base-") as tmp:
        if args.base:
            archive = subprocess.run(["git", "archive", args.base], cwd=ROOT, capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        for _ in range(args.repeat):
            rounds.append(_measure(ROOT, 1, True, cache))
            if args.base:
                base_rounds.append({r["exercise"]: r["off_s"] for r in _measure(Path(tmp), 1, False, cache + "-base")})
    rows = []
    for i, first in enumerate(rounds[0]):
        row = dict(first)
        for key in ("off_s", "on_s", "analyze_s"):
            row[key] = statistics.median(r[i][key] for r in rounds)
        rows.append(row)
    base = {name: statistics.median(b[name] for b in base_rounds) for name in base_rounds[0]} if base_rounds else {}
    load = os.getloadavg()
    commit, date = _commit(), dt.date.today().isoformat()
    cpus = os.cpu_count()
    lines = [f"# Tracing times ({date}, commit {commit})", "",
             f"`python bench/trace_times.py --repeat {args.repeat}" + (f" --base {args.base}`" if args.base else "`") +
             f" on this machine ({cpus} CPUs, shared with other work, load average {load[0]:.1f} at the end; one "
             f"emulator worker), median of {args.repeat} alternating rounds.",
             "Each exercise's first emulated case (what `tklab.trace(exercise)` traces), its solution; "
             "build not timed.",
             "", "| exercise | case | grid x block | launch, trace off (s) | traced launch (s) | analysis (s) | "
             "trace JSON (KiB) | events |" + (f" trace off at {args.base} (s) |" if base else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|" if base else "")]
    for r in rows:
        case = ", ".join(f"{k}={v}" for k, v in r["dims"].items())
        lines.append(f"| {r['exercise']} | {case} | {r['grid']} x {r['block']} | {r['off_s']:.3f} | {r['on_s']:.3f} | "
                     f"{r['analyze_s']:.3f} | {r['json_kb']:.0f} | {r['events']} |" +
                     (f" {base.get(r['exercise'], float('nan')):.3f} |" if base else ""))
    text = "\n".join(lines) + "\n"
    out = Path(args.out) / f"trace_times_{date}_{commit}.md"
    out.write_text(text)
    print(text)
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
