"""Every planted mistake and benign variant (solutions/<id>/planted.toml) checked on the CPU path, as a table.

    python bench/planted_cpu.py [--only ch11_flash_bwd ...]

Runs tests/test_planted_mistakes.py (the real ``python -m tklab check --no-bench --seed 23`` per mutated
solution, on the CPU emulator or numba's simulator; the ``planted_slow`` suites and the ``extra`` variants too) with
``TKLAB_PLANTED_REPORT`` set, and writes ``bench/results/planted_mistakes_cpu_<date>_<commit>.md``: one row per
mutation with its verdict, the check's wall time (its own process, two at a time on this machine) and why.
Exit status: pytest's (1 when a mistake passed or a benign variant failed).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import planted  # noqa: E402

from tklab import recorded  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", help="exercise ids (default: every suite)")
    args = p.parse_args()
    chosen = args.only or planted.exercises()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "verdicts.json"
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "",
                "tests/test_planted_mistakes.py", "-k", " or ".join(chosen)]
        env = {**os.environ, "TKLAB_PLANTED_REPORT": str(report), "TKLAB_PLANTED_FULL": "1",  # every variant
               "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        rc = subprocess.run(argv, cwd=ROOT, env=env).returncode
        rows = json.loads(report.read_text()) if report.exists() else []
    _write(rows, chosen)
    return rc


def _write(rows: list[dict], chosen: list[str]) -> None:
    by_id = {r["id"]: r for r in rows}
    today = datetime.date.today().isoformat()
    commit = recorded.commit()
    lines = [f"# Planted mistakes on the CPU path ({today}, commit {commit}, {os.cpu_count()} CPUs)", "",
             "`python -m tklab check <mutated solution> --no-bench --seed 23` without a GPU "
             f"(`{' '.join(['python bench/planted_cpu.py', *sys.argv[1:]])}`, tests/test_planted_mistakes.py); "
             "data: solutions/<id>/planted.toml. Expected: mistakes FAILED, benign PASSED (possibly on n of m "
             "cases). s: the check's wall time, two checks at a time.", "",
             "| exercise | kind | mutation | verdict on CPU | s | why (summary, cut) |", "|---|---|---|---|---|---|"]
    total = 0.0
    for e in chosen:
        for m in planted.load(e):
            r = by_id.get(m.id)
            kind = "benign" if m.benign else ("mistake (known CPU gap)" if m.cpu_misses else "mistake")
            if r is None:
                lines.append(f"| {e} | {kind} | {m.name} | not run | | |")
                continue
            total += r["seconds"]
            why = " ".join(r["summary"].split())[:110].replace("|", "/")
            lines.append(f"| {e} | {kind} | {m.name} | {r['verdict'].split(';')[0]} | {r['seconds']} | {why} |")
    lines += ["", f"{len(rows)} checks, {total:.0f} s of check wall time in all."]
    name = f"planted_mistakes_cpu_{today}_{commit}.md"
    (ROOT / "bench" / "results" / name).write_text("\n".join(lines) + "\n")
    print(f"wrote bench/results/{name}: {len(rows)} checks")


if __name__ == "__main__":
    sys.exit(main())
