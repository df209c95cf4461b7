"""bench/grading_rate.py in its small mode on this CPU, so its first run on the GPU is not its first run.

Three synthetic students (a solution, an untouched exercise, a file that does not compile) hand in ch01
and ch02; the script grades them as a shard and must find every verdict it expects, and write its report.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_small_mode_grades_a_synthetic_class_and_reports_a_rate(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "grading_rate.py"), "--small", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (report,) = tmp_path.glob("grading_rate_*.json")
    r = json.loads(report.read_text())
    assert r["students_graded"] == 3 and r["kinds"] == {"solution": 1, "untouched": 1, "broken": 1}
    assert r["verdicts_as_expected"] == "6/6" and not r["unexpected"]
    assert r["checks"] == 6 and r["students_per_minute"] > 0 and r["commit"] and r["device"]
    assert set(r["per_exercise"]) == {"ch01_naive_matmul", "ch02_smem_tiling"}
    assert "students per minute" in report.with_suffix(".md").read_text()
