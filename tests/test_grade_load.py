"""bench/grading_load.py at its smallest: four checks of ch01 started at once on this CPU (a solution, the
untouched exercise, a file that does not compile, a solution), each through the real checker and sandbox.
Every one must come back with the verdict its file deserves; no timing is asserted (the CPU is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_four_concurrent_checks_all_return_the_right_verdict(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "grading_load.py"), "--checks", "4", "--cuda-checks",
                           "0", "--no-alone", "--warm-cache", "--timeout", "120", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (report,) = tmp_path.glob("grading_load_*.json")
    r = json.loads(report.read_text())
    assert r["checks"] == r["concurrent"] == r["results_returned"] == 4 and not r["unexpected"]
    assert r["verdicts_as_expected"] == "4/4"
    kinds = sorted((x["kind"], x["compiled"], x["correct"]) for x in r["rows"])
    assert kinds == [("broken", "no", "no"), ("solution", "yes", "yes"), ("solution", "yes", "yes"),
                     ("untouched", "yes", "no")]
    ran = [x["established"] for x in r["rows"] if x["kind"] != "broken"]
    assert set(ran) <= {"simulator", "gpu", "cpu-emulation"}  # really run, not skipped (ch01: its PTX, interpreted)
    assert 0 < r["p50_s"] <= r["p90_s"] <= r["max_s"]
    assert "p50" in report.with_suffix(".md").read_text()
