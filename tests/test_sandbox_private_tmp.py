"""A workbook inside a folder of ``/tmp`` that only its owner can enter, checked by a root grader whose run
drops to ``nobody`` in bubblewrap: the run must read that copy of tklab (found by the hub test, whose
students' homes sit under pytest's ``/tmp/pytest-of-root``, mode 0700: a right file FAILED there with
"No module named ..." because the sandbox's own ``/tmp`` made the folders on the way root-only)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tklab.grading import sandbox

ROOT = Path(__file__).resolve().parent.parent


def test_a_workbook_under_a_private_tmp_folder_is_read_by_the_dropped_user(tmp_path):
    if sandbox.isolation().level != "bubblewrap" or sandbox._run_user()[0] is None and sandbox._drop_inside() is None:
        pytest.skip(f"the run does not change user here: {sandbox.isolation().describe()}")
    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    assert Path("/tmp") in private.parents and not sandbox._reachable_by_others(private)
    copy = private / "student" / "tklab"
    for part in ("tklab", "cuda", "solutions", "exercises"):
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    mine = copy / "exercises" / "ch01_naive_matmul.py"
    mine.write_text((ROOT / "solutions" / "ch01_naive_matmul" / "ch01_naive_matmul.py").read_text())
    proc = subprocess.run([sys.executable, "-m", "tklab", "check", str(mine), "--json", "--no-bench"], cwd=copy,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(copy)})
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0 and res["passed"] is True, (res["run_message"], proc.stderr[-1500:])
    assert res["isolation"].startswith("bubblewrap"), res["isolation"]
