"""The speed challenges' reference solutions against their libraries, on the GPU (issue 42).

    python bench/challenges.py [--rounds 3] [--only ID ...]     on an H200: writes bench/results/challenges_*
    python bench/challenges.py --dry-run [--out-dir DIR]         anywhere: the plan, compiled, nothing timed

Every challenge of the registry (an id holding ``_challenge_``: ``tklab.grading.leaderboard.is_challenge``) is
measured at its benchmark size (``SPEC.bench.dims``) exactly as its check launches it: the reference solution in
``solutions/<id>/<id>.cu`` compiled with the spec's options, its launch and arguments from the spec, prepared once
(arguments packed, tensor maps encoded), against the spec's library baseline (cuBLAS, SDPA) on the same device
arrays, in this one process. First each output is held (loosely, as the check's benchmark does) to what the spec
expects, so a speed belongs to a right answer; then ``--rounds`` rounds, the two contenders' order alternating
from round to round, each timing a median of CUDA-event batches of back-to-back calls (``tklab.bench``, no L2
flush: as a model calls them), the SM clock (``nvidia-smi``) read before and after each: only same-round ratios
count (shared/anchors.md).

It writes ``bench/results/challenges_<date>_<commit>.md`` and ``.json``; a challenge's check on a machine without a
GPU shows the newest record (``tklab.grading.leaderboard.recorded``). ``--dry-run`` compiles each reference for
sm_90a, plans the launch, the FLOPs and the baseline, times nothing and writes a report marked as a dry run only
where ``--out-dir`` says (such a record is never shown as a measurement). It finishes in well under 150 s on an
H200 (three challenges: inputs of up to 100 M elements, two contenders, three rounds of ~0.2 s timings).
Set GIT_COMMIT (or TKLAB_COMMIT) on machines without git.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tklab import recorded  # noqa: E402
from tklab.grading import leaderboard, specs  # noqa: E402
from tklab.grading.spec_kit import dims_text  # noqa: E402

RESULTS = ROOT / "bench" / "results"
#: back-to-back calls between one pair of CUDA events
BATCH = 20
#: milliseconds each timing aims to fill
TARGET_MS = 150


def challenge_ids(only: list[str] | None = None) -> list[str]:
    """The registry's challenges (or those of ``only``, by id or prefix, each of them a challenge)."""
    ids = [i for i in specs.all_ids() if leaderboard.is_challenge(i)]
    if not only:
        return ids
    picked = [specs.find(o).id for o in only]
    bad = [p for p in picked if p not in ids]
    if bad:
        raise SystemExit(f"not a challenge: {', '.join(bad)} (challenges: {', '.join(ids)})")
    return picked


def sm_clock_mhz() -> int | None:
    """The GPU's current SM clock (MHz) from nvidia-smi, or None where it cannot be read."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i",
                              os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]],
                             capture_output=True, text=True, timeout=10)
        return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def compiled(spec: Any) -> Any:
    """The reference solution's kernel, compiled as the check compiles it (sm_90a, the spec's options)."""
    import tklab

    source = (ROOT / spec.solution).read_text()
    return tklab.compile(source, arch=spec.arch, name=spec.filename, options=spec.options)[spec.kernel]


def plan(spec: Any) -> dict[str, Any]:
    """What a measurement of ``spec`` runs, without a GPU: the compiled reference and the launch at the benchmark."""
    b = spec.bench
    shape = spec.launch(b.dims)
    k = compiled(spec)
    return {"dims": dims_text(b.dims), "library": b.baseline_name, "output": b.output,
            "flops": b.flops(b.dims) if b.flops else None, "grid": list(shape.grid), "block": list(shape.block),
            "shared_mem": shape.shared_mem, "registers": k.registers, "spill_bytes": k.spill_bytes,
            "solution": str(Path(spec.solution).relative_to(ROOT) if Path(spec.solution).is_absolute()
                            else spec.solution)}


def measure(spec: Any, rounds: int, seed: int = 42) -> dict[str, Any]:
    """The reference against the library at the benchmark size on this GPU (see the module docstring)."""
    import cupy as cp
    import numpy as np

    from tklab.run.arrays import as_values, isclose, poisoned
    from tklab.run.bench import bench as tk_bench

    b = spec.bench
    dims = b.dims
    entry = plan(spec)
    rng = np.random.default_rng(seed)
    arrays = {n: cp.asarray(v) for n, v in spec.inputs(rng, dims).items()}
    for name, (shape, dtype) in spec.outputs(dims).items():
        arrays[name] = poisoned(cp, shape, dtype)
    shape = spec.launch(dims)
    ours = compiled(spec).prepare(shape.grid, shape.block, spec.args(arrays, dims), shared_mem=shape.shared_mem)
    library = b.baseline(arrays, dims)
    ours()
    cp.cuda.Device().synchronize()
    expect = b.expect(arrays, dims) if b.expect is not None else library()
    entry["output_right"] = bool(isclose(as_values(arrays[b.output]), cp.asarray(expect), b.rtol, b.atol).all())
    if not entry["output_right"]:
        entry["error"] = f"the reference's {b.output} is wrong at the benchmark size: not timed"
        return entry
    contenders = {"reference": ours, "library": library}
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        order = list(contenders) if r % 2 == 0 else list(reversed(contenders))
        for who in order:
            before = sm_clock_mhz()
            ms = tk_bench(contenders[who], flops=entry["flops"], target_ms=TARGET_MS, progress=False, ceilings=False,
                          batch=BATCH, flush_l2=False).ms
            rows.append({"round": r, "who": who, "ms": ms, "sm_clock_mhz": before,
                         "sm_clock_after_mhz": sm_clock_mhz()})
    ratios = []
    for r in range(rounds):
        ms = {x["who"]: x["ms"] for x in rows if x["round"] == r}
        ratios.append(ms["library"] / ms["reference"])
    entry.update(rows=rows, ratio_rounds=ratios, ratio=statistics.median(ratios),
                 reference_ms=statistics.median(x["ms"] for x in rows if x["who"] == "reference"),
                 library_ms=statistics.median(x["ms"] for x in rows if x["who"] == "library"))
    return entry


def device() -> tuple[str, str]:
    """(this GPU's name, torch's version)."""
    import torch

    return torch.cuda.get_device_name(), torch.__version__


def report(data: dict[str, Any]) -> str:
    """The markdown report of one run (or dry run)."""
    lines = [f"# Speed challenges: the references against their libraries, {data['date']}", "",
             f"- device: {data['device']}; commit: {data['commit']}; NVRTC: {data['nvrtc']}",
             f"- written by `python bench/challenges.py {' '.join(data['argv'])}`",
             "- method: the reference solution prepared once, as the check launches it, against the spec's library on "
             f"the same arrays; {data['rounds']} rounds, order alternating; medians of CUDA-event batches of {BATCH} "
             "back-to-back calls, no L2 flush; SM clock from nvidia-smi before and after each timing", ""]
    if data.get("dry_run"):
        lines += ["**Dry run: nothing was timed** (no GPU needed; the plan and the compiled references only).", ""]
        lines += ["| challenge | at | library | launch | registers | spilled |", "|---|---|---|---|---:|---:|"]
        for cid, e in data["challenges"].items():
            lines.append(f"| {cid} | {e['dims']} | {e['library']} | grid {tuple(e['grid'])}, block "
                         f"{tuple(e['block'])}, {e['shared_mem']} B | {e['registers']} | {e['spill_bytes']} |")
        return "\n".join(lines) + "\n"
    lines += ["| challenge | at | reference ms | library ms | ratio (library / reference), per round | TFLOP/s "
              "(reference / library) | SM clock MHz |", "|---|---|---:|---:|---|---|---|"]
    for cid, e in data["challenges"].items():
        if e.get("error"):
            lines.append(f"| {cid} | {e['dims']} | – | – | {e['error']} | | |")
            continue
        clocks = [c for x in e["rows"] for c in (x["sm_clock_mhz"], x["sm_clock_after_mhz"]) if c]
        rate = (f"{e['flops'] / e['reference_ms'] / 1e9:.0f} / {e['flops'] / e['library_ms'] / 1e9:.0f}"
                if e.get("flops") else "")
        lines.append(f"| {cid} | {e['dims']} | {e['reference_ms']:.3f} | {e['library_ms']:.3f} ({e['library']}) | "
                     f"{e['ratio']:.3f} ({', '.join(f'{r:.3f}' for r in e['ratio_rounds'])}) | {rate} | "
                     f"{f'{min(clocks)}–{max(clocks)}' if clocks else 'not read'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=None, help="challenge ids (or prefixes)")
    ap.add_argument("--dry-run", action="store_true", help="compile and plan only: no GPU needed, nothing timed")
    ap.add_argument("--out-dir", type=Path, default=None, help="where the report goes (default: bench/results; a dry "
                    "run writes one only when this is given)")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    ids = challenge_ids(args.only)
    t = time.monotonic()
    data: dict[str, Any] = {"date": datetime.date.today().isoformat(), "commit": recorded.commit(),
                            "nvrtc": recorded.nvrtc(), "dry_run": args.dry_run, "rounds": args.rounds,
                            "argv": sys.argv[1:] if argv is None else list(argv), "challenges": {}}
    if args.dry_run:
        data["device"] = "none (dry run)"
        for cid in ids:
            data["challenges"][cid] = plan(specs.get(cid))
            print(f"  {cid}: {data['challenges'][cid]['dims']} against {data['challenges'][cid]['library']}: planned",
                  flush=True)
    else:
        data["device"], data["torch"] = device()
        for cid in ids:
            e = measure(specs.get(cid), args.rounds)
            data["challenges"][cid] = e
            print(f"  {cid}: " + (e["error"] if e.get("error") else
                                  f"reference {e['reference_ms']:.3f} ms, {e['library']} {e['library_ms']:.3f} ms, "
                                  f"ratio {e['ratio']:.3f}"), flush=True)
    data["seconds"] = round(time.monotonic() - t, 1)
    text = report(data)
    out = args.out_dir if args.out_dir is not None else (None if args.dry_run else RESULTS)
    if out is None:
        print(text, end="")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    stem = f"challenges_{data['date']}_{data['commit']}" + ("_dry_run" if args.dry_run else "")
    (out / f"{stem}.md").write_text(text)
    (out / f"{stem}.json").write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out / stem}.md and .json ({data['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
