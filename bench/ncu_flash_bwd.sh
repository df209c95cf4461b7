#!/usr/bin/env bash
# Chapter 11's backward beside cuDNN's (SDPA) and FlashAttention-4's (when importable) under Nsight Compute:
# one backward each (bench/flash_bwd.py run, after a warm-up), every kernel between cudaProfilerStart/Stop.
#   bench/ncu_flash_bwd.sh [D,N ...]          default: 128,8192 64,8192 (not causal; CAUSAL=1 for causal)
# Writes, per contender and shape, the details page and the raw metrics to $OUT (else bench/results/ncu) as
# ncu_bwd_<who>_d<D>_n<N>[_causal]_<commit>.txt. WHO="ch11 cudnn" limits the contenders; OPTIONS=DQ_SUM=1
# builds ours with options (the file name gains them).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/results/ncu}
mkdir -p "$out"
commit=${GIT_COMMIT:-${TKLAB_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}}
shapes=("$@")
[ ${#shapes[@]} -eq 0 ] && shapes=(128,8192 64,8192)
causal=${CAUSAL:-0}
py=${PYTHON:-python3}
metrics=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_tensor_op_gmma.sum,lts__t_sectors_op_red.sum,lts__t_sectors_op_atom.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum
for shape in "${shapes[@]}"; do
  d=${shape%,*} n=${shape#*,}
  for who in ${WHO:-ch11 cudnn fa4}; do
    opts=${OPTIONS:-}
    tag=ncu_bwd_${who}$([ -n "$opts" ] && [ "$who" = ch11 ] && echo "_${opts//[=,]/_}")_d${d}_n${n}$([ "$causal" = 1 ] && echo _causal)_${commit}
    rep=/tmp/$tag
    ncu --profile-from-start off --section SpeedOfLight --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats \
        --section Occupancy --section InstructionStats --metrics "$metrics" -f -o "$rep" \
        "$py" bench/flash_bwd.py run --who "$who" --d "$d" --n "$n" --options "$opts" $([ "$causal" = 1 ] && echo --causal) \
        > "$rep.log" 2>&1 || { echo "$who d=$d n=$n: ncu failed"; tail -5 "$rep.log"; continue; }
    { tail -3 "$rep.log"; ncu --import "$rep.ncu-rep" --page details --print-details all;
      ncu --import "$rep.ncu-rep" --page raw; } > "$out/$tag.txt" 2>&1
    echo "$who d=$d n=$n: $(grep -c 'Section: GPU Speed Of Light' "$out/$tag.txt") kernels -> $out/$tag.txt"
  done
done
