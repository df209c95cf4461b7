"""``make gpu-check`` / ``python -m tklab report``: everything that needs a GPU, in one dated report.

Runs, on a machine with an NVIDIA GPU: ``tklab doctor``; the GPU-marked tests; every notebook under
nbval (with ``TKLAB_RECORD=1``, so measured numbers land in ``bench/results/recorded.json``); the
benchmark scripts in ``bench/*.py``. Writes ``<out>/gpu-check_<date>_<commit>.md`` naming the device,
driver, commit and date, with each step's verdict and the tail of its output, and
``<out>/exercises_<date>_<commit>.json`` with every reference solution's check (verdict, speed ratio).
Works offline: it only needs the packages importable (see README, "GPU boxes without internet").

Usage: ``python -m tklab report [--out DIR] [--skip tests,notebooks,bench] [--notebooks 0[0-4]*]
[--bench flash_fwd.py,...] [--timeout S] [--cell-timeout S]``. ``--notebooks`` and ``--bench`` run a part of the
whole (a GPU lent for ten minutes at a time takes the check in parts; each part's report names what it covered).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import recorded
from ..paths import REPO
from ..run import gpu

ROOT = REPO


@dataclass
class Step:
    name: str
    command: list[str]
    returncode: int = -1
    seconds: float = 0.0
    output: str = ""

    @property
    def verdict(self) -> str:
        return "passed" if self.returncode == 0 else ("timed out" if self.returncode == 124 else "FAILED")


def _run(step: Step, timeout: float, env: dict[str, str]) -> Step:
    print(f"== {step.name}: {' '.join(step.command)}", flush=True)
    start = time.perf_counter()
    try:
        out = subprocess.run(step.command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        step.returncode, step.output = out.returncode, out.stdout + out.stderr
    except subprocess.TimeoutExpired as e:
        step.returncode = 124
        step.output = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
    step.seconds = time.perf_counter() - start
    tail = "\n".join(step.output.strip().splitlines()[-3:])
    print(f"   {step.verdict} in {step.seconds:.0f} s\n   {tail}", flush=True)
    return step


def steps(skip: set[str], notebooks: str = "", bench: str = "", cell_timeout: float = 300) -> list[Step]:
    """The check's steps; ``notebooks`` a glob of notebook names (default: all), ``bench`` a comma-separated
    list of bench/ scripts (default: all). A notebook cell that runs past ``cell_timeout`` seconds fails by its
    number, and the report lists the slowest cells: a notebook that outruns the step's limit otherwise leaves
    no word of where its time went."""
    py = sys.executable
    found: list[Step] = [Step("doctor", [py, "-m", "tklab", "doctor"])]
    if "tests" not in skip:
        found.append(Step("GPU tests", [py, "-m", "pytest", "-q", "-m", "gpu or hopper", "-p", "no:cacheprovider",
                                        "tests"]))
    if "notebooks" not in skip:
        chosen = ["notebooks"]
        if notebooks:
            chosen = [f"notebooks/{p.name}" for p in sorted((ROOT / "notebooks").glob(notebooks))
                      if p.suffix == ".ipynb" and ".bak-" not in p.name]
            if not chosen:
                raise SystemExit(f"--notebooks {notebooks!r} matches no notebook in {ROOT / 'notebooks'}")
        found.append(Step(f"notebooks (nbval){'' if not notebooks else ': ' + notebooks}",
                          [py, "-m", "pytest", "-q", "--nbval-lax", "--nbval-current-env", "-p", "no:cacheprovider",
                           f"--nbval-cell-timeout={cell_timeout:g}", "--durations=8", "--ignore-glob=*.bak-*",
                           *chosen]))
    if "bench" not in skip:
        scripts = [p for p in sorted((ROOT / "bench").glob("*.py")) if not p.name.startswith("_")]
        if bench:
            wanted = [x.strip() for x in bench.split(",") if x.strip()]
            unknown = sorted(set(wanted) - {p.name for p in scripts})
            if unknown:
                raise SystemExit(f"--bench: no script {unknown} in bench/; there are {[p.name for p in scripts]}")
            scripts = [p for p in scripts if p.name in wanted]
        found += [Step(f"benchmark {p.name}", [py, str(p)]) for p in scripts]
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tklab report", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--skip", default="", help="comma-separated: tests, notebooks, bench")
    ap.add_argument("--notebooks", default="", help="glob of notebooks to run, e.g. '0[0-5]*' (default: all)")
    ap.add_argument("--bench", default="", help="comma-separated bench/ scripts to run (default: all)")
    ap.add_argument("--part", default="", help="name of this part, added to the report's file name")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per step")
    ap.add_argument("--cell-timeout", type=float, default=300, help="seconds per notebook cell")
    args = ap.parse_args(argv)
    if not (args.timeout > 0 and args.cell_timeout > 0):
        ap.error(f"--timeout and --cell-timeout must be positive seconds; got {args.timeout:g} and "
                 f"{args.cell_timeout:g}")
    if not gpu.available():
        print("make gpu-check needs an NVIDIA GPU; none is visible here (try `python -m tklab doctor`).")
        return 2
    from cuda.bindings import driver

    _, version = driver.cuDriverGetVersion()
    props = gpu.properties()
    import json
    import tempfile

    checks_dir = tempfile.mkdtemp(prefix="tklab-checks-")
    env = {**os.environ, "TKLAB_RECORD": "1", "PYTHONUNBUFFERED": "1", "TKLAB_COMMIT": recorded.commit(),
           "TKLAB_CHECK_RESULTS": checks_dir}
    chosen = steps({x.strip() for x in args.skip.split(",") if x.strip()}, args.notebooks, args.bench,
                   args.cell_timeout)
    done = [_run(s, args.timeout, env) for s in chosen]
    today = dt.date.today().isoformat()
    lines = [f"# tklab GPU check, {today}", "",
             f"- device: {props.name} ({gpu.arch()}, {props.sm_count} SMs, L2 {props.l2_bytes >> 20} MiB)",
             f"- driver CUDA version: {version // 1000}.{version % 1000 // 10}",
             f"- commit: {env['TKLAB_COMMIT']}", f"- date: {dt.datetime.now().isoformat(timespec='seconds')}",
             f"- NVRTC: {recorded.nvrtc()} (its ptxas schedules the kernels' SASS)",
             f"- python: {sys.version.split()[0]}",
             f"- part: {args.part or 'the whole check'} (skip: {args.skip or 'nothing'}; notebooks: "
             f"{args.notebooks or 'all'}; bench: {args.bench or 'all'})", "",
             "| step | verdict | seconds |", "|---|---|---|"]
    lines += [f"| {s.name} | {s.verdict} | {s.seconds:.0f} |" for s in done]
    for s in done:
        tail = "\n".join(s.output.strip().splitlines()[-40:])
        lines += ["", f"## {s.name} ({s.verdict})", "", "```", tail, "```"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    checks = {p.stem: json.loads(p.read_text()) for p in sorted(Path(checks_dir).glob("*.json"))}
    if checks:
        (out / f"exercises_{today}_{env['TKLAB_COMMIT']}.json").write_text(json.dumps(checks, indent=1, default=str))
        lines += ["", "## exercise checks (reference solutions)", "",
                  "| exercise | passed | speed ratio |", "|---|---|---|"]
        lines += [f"| {k} | {v.get('passed')} | {v.get('speed_ratio')} |" for k, v in checks.items()]
    part = f"_{args.part}" if args.part else ""
    path = out / f"gpu-check_{today}_{env['TKLAB_COMMIT']}{part}.md"
    path.write_text("\n".join(lines) + "\n")
    print(f"report written to {path}")
    return 0 if all(s.returncode == 0 for s in done) else 1


if __name__ == "__main__":
    sys.exit(main())
