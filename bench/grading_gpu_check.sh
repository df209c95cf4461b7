#!/usr/bin/env bash
# GPU re-check of the grading work (issue 15, issue 13 item 3), one command, about 4 minutes on an H200 for steps 1-3 (step 4 not yet timed there):
#   1. the exercise checks on the GPU: every reference solution passes with a speed ratio against its target,
#      planted CUDA faults and hangs are reported (the run now happens in tklab.grading.sandbox, verdicts in the parent);
#   2. the planted-student isolation tests, with ch01 running on the GPU inside the sandbox;
#   3. a class with the planted students graded on the GPU (CSV kept);
#   4. the planted-mistake suites of chapters 05-10 (issue 23, tests/test_planted_mistakes_gpu.py): every
#      planted mistake FAILS on the GPU (plus the emulator's hazard analysis) with 3 seeds, benign variants PASS.
# Chapters are named by prefix (CHAPTERS below); each prefix stands for every exercise of that chapter, so a
# chapter with several exercises is checked whole.
# Results under $OUT (else bench/results/grading_gpu_<date>/); a short summary is printed at the end.
# Usage: bash bench/grading_gpu_check.sh        (PY=python3 by default; the one with tklab's dependencies)
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-python3}"
STAMP="$(date +%Y-%m-%d)_$(git rev-parse --short HEAD 2>/dev/null || echo nogit)"
OUT="${OUT:-bench/results/grading_gpu_$STAMP}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TKLAB_CHECK_RESULTS="$OUT/checks" TKLAB_CACHE_DIR="$OUT/.tklab-cache"
LOG="$OUT/grading_gpu_check.log"
step() { echo "== $1" | tee -a "$LOG"; }

step "device, sandbox"
$PY - <<'PY' 2>&1 | tee -a "$LOG"
from tklab import gpu, sandbox
print("device:", gpu.name(), gpu.arch())
print("isolation (GPU runs):", sandbox.isolation(gpu=True).describe())
PY

step "1. GPU exercise checks (pytest -m gpu tests/test_check.py)"
timeout 200 $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_check.py 2>&1 | tail -25 | tee -a "$LOG"
R1=${PIPESTATUS[0]}

step "2. planted students, ch01 on the GPU in the sandbox (tests/test_isolation.py)"
timeout 100 $PY -m pytest -q -p no:cacheprovider tests/test_isolation.py 2>&1 | tail -15 | tee -a "$LOG"
R2=${PIPESTATUS[0]}

# The graded chapters' exercise ids: every exercise whose id starts with one of the prefixes.
CHAPTERS="${CHAPTERS:-ch01 ch02 ch04}"
IDS="$($PY -c 'import sys; from tklab import specs; print(" ".join(i for i in specs.all_ids() if i.startswith(tuple(sys.argv[1:]))))' $CHAPTERS)"
echo "chapters $CHAPTERS: exercises $IDS" | tee -a "$LOG"

step "3. grading a planted class on the GPU"
timeout 150 $PY - "$OUT" $IDS <<'PY' 2>&1 | tail -30 | tee -a "$LOG"
import sys
from pathlib import Path
sys.path.insert(0, "tests")
import test_grade
from tklab.grading.grade import main
out = Path(sys.argv[1])
cls = test_grade.build_class(out / "class_work")
sys.exit(main(["--class", str(cls), "--out", str(out / "grades.csv"),
               "--exercises", "ch01_naive_matmul", "ch02_smem_tiling", "ch04_swizzle",  # full ids: chapters hold drills too
               "--timeout", "20", "--no-bench", "--allow-unsandboxed"]))  # a planted class, on a lent box
PY
R3=${PIPESTATUS[0]}

step "4. planted mistakes of chapters 05-10 on the GPU, 3 seeds (tests/test_planted_mistakes_gpu.py)"
timeout "${PLANTED_TIMEOUT:-1500}" $PY -m pytest -q -p no:cacheprovider -m gpu -rf --durations=5 \
    tests/test_planted_mistakes_gpu.py 2>&1 | tail -60 | tee -a "$LOG"
R4=${PIPESTATUS[0]}

step "summary"
$PY - "$OUT" <<'PY' 2>&1 | tee -a "$LOG"
import json, sys
from pathlib import Path
from tklab import specs
out = Path(sys.argv[1])
for f in sorted((out / "checks").glob("*.json")):
    d = json.loads(f.read_text())
    s = d.get("speed") or {}
    target = specs.get(d["exercise"]).bench.target if specs.get(d["exercise"]).bench else None
    print(f"{d['exercise']:<24} {d['verdict']:<13} established={d.get('established')} "
          f"ratio={s.get('ratio')} target={target} reference_ratio={s.get('reference_ratio')} "
          f"evidence={d.get('evidence')!r}")
PY
echo "exit codes: gpu checks $R1, isolation $R2, grading $R3, planted mistakes $R4 (0 = passed); files in $OUT" \
    | tee -a "$LOG"
