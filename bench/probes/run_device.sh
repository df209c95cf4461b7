#!/usr/bin/env bash
# Re-measure every committed probe table on a GPU box (needs python3 with cupy, and ncu for the banks).
#   PYTHONPATH=$PWD bench/probes/run_device.sh [COMMIT]
# Tables land in bench/results/; logs (and copies of the tables) in $OUT if set, else /tmp/tklab_probes.
set -u
export PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1
LOGS=${OUT:-/tmp/tklab_probes}
mkdir -p "$LOGS"
COMMIT=${1:-${TKLAB_COMMIT:-}}
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$LOGS/device.txt"
timeout 170 python3 bench/probes/layouts_probe.py --isolate ${COMMIT:+--commit $COMMIT} 2>&1 | tee "$LOGS/layouts.log"
budget=$(( ${PROBE_DEADLINE_S:-380} - (SECONDS - start) ))
echo "banks: ${budget}s left"
timeout $((budget + 40)) python3 bench/probes/banks_probe.py --ncu --budget-s "$budget" --log-dir "$LOGS" \
  ${COMMIT:+--commit $COMMIT} 2>&1 | tee "$LOGS/banks.log"
cp bench/results/banks_h200.json bench/results/layouts_h200.json "$LOGS/" 2>/dev/null
echo "done in $((SECONDS - start)) s"
