"""How long a graded CPU check takes, per CUDA exercise, with the PTX interpreter and with the native practice build.

Each exercise's solution is checked as a learner's file would be (``tklab.check(id, path=copy, bench=False)``: static
checks, the sandboxed run, the verdict) on this machine ``--rounds`` times; the median is reported, with the verdict.
Cold (the default): each run's copy of the solution ends with a fresh comment, as a learner's edit would, so nothing
of it is cached (NVRTC's build for the interpreter, g++'s for the native engine); ``--warm`` repeats the same file.
``TKLAB_EMU_ENGINE`` picks the engine (the native build is what the course graded with before the interpreter; it
stays as the practice path without NVRTC).

    python bench/check_times.py --out bench/results/check_times_<date>_<commit>.md [--ids ch02_smem_tiling,...]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _one(exercise: str, solution: Path, engine: str, cold: bool = True) -> tuple[float, str]:
    import tempfile
    import uuid

    folder = Path(tempfile.mkdtemp(prefix="check-times-"))
    copy = folder / solution.name
    mark = ("# " if solution.suffix == ".py" else "// ") + f"a learner's edit {uuid.uuid4().hex if cold else ''}\n"
    copy.write_text(solution.read_text() + mark)
    code = ("import sys, time, tklab\n"
            "t = time.perf_counter()\n"
            f"r = tklab.check({exercise!r}, path={str(copy)!r}, bench=False, trace=False)\n"
            "print(f'{time.perf_counter() - t:.2f} {r.passed} {r.established}')\n")
    env = {**os.environ, "TKLAB_EMU_ENGINE": engine}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=900)
    last = (out.stdout.strip().splitlines() or ["nan ? ?"])[-1].split()
    return float(last[0]), " ".join(last[1:])


def main() -> int:
    from tklab.grading import specs
    from tklab.recorded import commit, nvrtc

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--ids", default="")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--engines", default="ptx,native")
    ap.add_argument("--warm", action="store_true", help="the same file every run (compiles cached after the first)")
    args = ap.parse_args()
    ids = [i for i in args.ids.split(",") if i] or [i for i in specs.all_ids()
                                                     if specs.get(i).language == "cuda" and not specs.get(i).design]
    rows = []
    for ex in ids:
        spec = specs.get(ex)
        sol = ROOT / spec.solution
        row = [ex]
        for engine in args.engines.split(","):
            _one(ex, sol, engine, cold=False)  # the emulator's runtime and the tile library's headers, built once
            times, verdict = [], ""
            for _ in range(args.rounds):
                t, verdict = _one(ex, sol, engine, cold=not args.warm)
                times.append(t)
            row.append(f"{statistics.median(times):.1f} s ({verdict})")
            print(ex, engine, times, verdict, flush=True)
        rows.append(row)
    how = "the same file again (warm caches)" if args.warm else "a fresh edit each run (nothing of the file cached)"
    head = (f"# Graded CPU check times (solution files, bench=False, {how}, median of {args.rounds})\n\n"
            f"measured on: {platform.node()} ({os.cpu_count()} CPUs, no GPU), {time.strftime('%Y-%m-%d')}, commit "
            f"{commit()}, NVRTC {nvrtc()}\n\n| exercise | " + " | ".join(args.engines.split(",")) + " |\n|---|" +
            "---|" * len(args.engines.split(",")) + "\n")
    text = head + "".join("| " + " | ".join(r) + " |\n" for r in rows)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
