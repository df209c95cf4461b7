"""Every planted mistake and benign variant (solutions/<id>/planted.toml) checked on the GPU, three seeds per mistake.

    python bench/planted_gpu.py [--workers 14] [--seeds 1 2 3] [--only ch10_flash ...] [--timed | --speed-only]

The same runs as ``tests/test_planted_mistakes_gpu.py`` (the real ``python -m tklab check`` in a fresh process
per file, the GPU run with the emulator's hazard analysis beside it), printed as each verdict arrives, so a
run cut short by a time limit still reports what it reached. Writes
``bench/results/planted_mistakes_gpu_<date>_<commit>.md`` (and ``$OUT`` when set). ``--timed`` also times the
mistakes marked ``speed`` (chapter 10's missing overlap) one at a time, with the reference solution's same-run
ratio that the concept floor reads. Exit status 1 when a mistake passed or a benign variant failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import planted  # noqa: E402

from tklab import recorded  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=min(14, os.cpu_count() or 1))
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--only", nargs="*", help="exercise ids (default: every suite)")
    p.add_argument("--timed", action="store_true", help="also the timed mistakes, one at a time")
    p.add_argument("--speed-only", action="store_true",
                   help="only the timed mistakes and the benign variants, every one timed against the reference "
                        "(what a concept floor's ratio is chosen from)")
    args = p.parse_args()
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / "planted-gpu"
    mutations = [m for e in planted.exercises() if not args.only or e in args.only for m in planted.load(e)]
    if args.speed_only:
        args.timed = True
        mutations = [m if m.speed else dataclasses.replace(m, speed=True) for m in mutations if m.speed or m.benign]
    jobs = [(m, s) for m in mutations if args.timed or not m.speed
            for s in (args.seeds[:1] if m.benign else args.seeds)]
    rows: list[str] = []
    wrong: list[str] = []

    def one(m: planted.Mutation, seed: int) -> tuple[planted.Mutation, int, planted.Verdict]:
        path = planted.mutated_file(m, folder / m.exercise / str(seed))
        return m, seed, planted.run_check(path, m.exercise, seed, bench=m.speed)

    cut = ""
    pool = ThreadPoolExecutor(max_workers=args.workers)
    try:  # `timeout -s INT ...` stops it with what it reached written down
        futures = [pool.submit(one, m, s) for m, s in jobs if not m.speed]
        for f in as_completed(futures):
            m, seed, v = f.result()
            rows.append(_row(m, seed, v, wrong))
            print(rows[-1], flush=True)
        for m, s in [(m, s) for m, s in jobs if m.speed]:  # one at a time: a timing shares the GPU with nothing
            m, seed, v = one(m, s)
            rows.append(_row(m, seed, v, wrong))
            print(rows[-1], flush=True)
    except KeyboardInterrupt:
        cut = f"cut short after {len(rows)} of {len(jobs)} checks"
        pool.shutdown(wait=False, cancel_futures=True)
    _write(rows, wrong, args, cut)
    return 1 if wrong or cut else 0


def _row(m: planted.Mutation, seed: int, v: planted.Verdict, wrong: list[str]) -> str:
    expected = "PASS" if m.benign else "FAIL"
    ok = v.passed if m.benign else v.failed
    if not ok and not m.cpu_misses:
        wrong.append(m.id)
    ratio = (v.report.get("speed") or {}).get("reference_ratio")
    extra = f"; vs reference {ratio:.2f}" if isinstance(ratio, (int, float)) else ""
    note = " (a mistake the emulator cannot see: informational)" if m.cpu_misses and not ok else ""
    return (f"| {m.exercise} | {m.name} | {seed} | {expected} | {v.verdict} ({v.established}){note} | "
            f"{v.seconds:.0f} s | {' '.join(v.summary.split())[:160]}{extra} |")


def _write(rows: list[str], wrong: list[str], args: argparse.Namespace, cut: str) -> None:
    today = datetime.date.today().isoformat()
    head = [f"# Planted mistakes on the GPU, {today}", "",
            f"- commit {recorded.commit()}; NVRTC {recorded.nvrtc()}; "
            f"`python bench/planted_gpu.py {' '.join(sys.argv[1:])}`",
            f"- {len(rows)} checks{' (' + cut + ')' if cut else ''}; wrong verdicts: "
            f"{', '.join(sorted(set(wrong))) or 'none'}", "",
            "| exercise | variant | seed | expected | verdict (evidence) | time | summary |",
            "|---|---|---|---|---|---|---|"]
    text = "\n".join(head + sorted(rows)) + "\n"
    name = f"planted_mistakes_gpu_{today}_{recorded.commit()}.md"
    for d in [ROOT / "bench" / "results", *([Path(os.environ["OUT"])] if os.environ.get("OUT") else [])]:
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
    print(f"wrote {name}: {len(rows)} checks, {len(set(wrong))} wrong")


if __name__ == "__main__":
    sys.exit(main())
