#!/usr/bin/env bash
# One H200 round of the attention work, in parts that fit a lent machine's 10-minute calls:
#   bash bench/attention_gpu_round.sh PART [PART ...]
# PARTs (each with its own time limit, seconds):
#   fa4-a | fa4-b   install FlashAttention-4 from ../shared/tools/fa4_wheels.sh's files (carried as .fa4a, .fa4b):
#                   fa4-a copies .fa4a/* aside, fa4-b adds .fa4b/* and installs (the machine must stay warm between)
#   kit             what the notebooks' check needs and the box lacks, from bench/notebook_wheels.sh .nbkit (carried in
#                   the same call, 46 MB): nbval with a Jupyter kernel, and the NVRTC the workbook pins in place of the
#                   box's, so the notebooks' stored SASS counts and the kernels timed are what a learner's pip install
#                   compiles
#   notebooks       nbval of chapters 07-11 through tklab.course.report (after `kit`, in this call or an earlier one);
#                   NOTEBOOKS="11:11* 10:10*" picks some (part name:glob; default all three groups); NB_LIMIT
#                   seconds each (default 250; a cell that outlives it less 60 fails by its number, the slowest listed)
#   host            bench/attention_host.py: the host time of tklab.attention's calls against SDPA's, with a cProfile
#   bwd-tests       the chapter's backward (DQ_FRAGMENTS at d = 128) on the GPU: its float64-autograd, layout,
#                   determinism and remembered-launch tests, and the exercise's check of the solution (GPU cases and its timed bench)
#   bwd             bench/flash_bwd.py: the chapter's kernel (DQ_FRAGMENTS at d = 128) against UNIFORM=1 (its
#                   default at d = 128, so there a noise control; at d = 64 48 fewer loop instructions) and the
#                   libraries, 3 rounds (FA4 beside it when installed); BWD_VARIANTS, BWD_ROUNDS pick others
#   fwd             bench/flash_fwd.py check + bench of MASK_SPLIT (BC = 176, and 128 at d = 128) beside the
#                   defaults, 2 rounds
#   ncu             bench/ncu_flash_bwd.sh: the chapter's kernel and FA4 at d=128 and 64, DQ_FRAGMENTS=0 at 128, N=8192
#   train           bench/train_tiny_gpt.py --seeds 4 --profile (the criterion's noise floor, the host time)
#   planted         bench/planted_gpu.py --seeds 1 for chapters 10 and 11
#   check-stages    where a graded check's time goes on this box: `tklab check --stages` of chapter 10's two
#                   solutions (notebook 10's slowest cells on the H100, 209 s and 182 s), each stage line stamped
#                   with the seconds since the check began
# Writes into bench/results/ (as each script does) and, where $OUT is set (the device tool), one tarball of every
# file this round wrote there. Every result names device, commit and date itself. Why a script: the session record
# (bench/results/gpu-session_*.md) can then cite the part that ran, and anyone can run it again.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TKLAB_COMMIT="${TKLAB_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || cat bench/_base/REV 2>/dev/null || echo unknown)}"
FA4_SITE=${FA4_SITE:-/root/fa4site} FA4_PARTS=${FA4_PARTS:-/root/fa4p}
SPLIT_VARIANTS=("ch10 split mask" "ch10 split mask BC=128")  # the fwd part checks these, then times them
stamp=$(mktemp); log=${OUT:-/tmp}/attention_gpu_round.log
say() { echo "== $*" | tee -a "$log"; }
[ -d "$FA4_SITE" ] && export PYTHONPATH="$PYTHONPATH:$FA4_SITE:$FA4_SITE/nvidia_cutlass_dsl/dsl_packages"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader 2>&1 | tee -a "$log"
for part in "$@"; do
  case $part in
    fa4-a) say "FA4 part A aside"; mkdir -p "$FA4_PARTS" && cp .fa4a/* "$FA4_PARTS"/ ;;
    fa4-b) say "FA4 install"; cp .fa4b/* "$FA4_PARTS"/ && mkdir -p "$FA4_SITE"
           # unzipped, not pip-installed: the DSL's wheels share one package folder (as ../shared/tools/fa4_wheels.sh)
           for w in "$FA4_PARTS"/*.whl; do python3 -m zipfile -e "$w" "$FA4_SITE"/; done
           cat "$FA4_PARTS"/cu13libs.part.* | tar -xJ -C "$FA4_SITE"
           export PYTHONPATH="$PYTHONPATH:$FA4_SITE:$FA4_SITE/nvidia_cutlass_dsl/dsl_packages"
           python3 -c "from flash_attn.cute import flash_attn_func" 2>&1 | tail -1 | tee -a "$log" ;;
    kit) say "notebook kit: nbval, a Jupyter kernel, the pinned NVRTC"
         python3 -m pip install -q --no-deps --no-index .nbkit/*.whl 2>&1 | grep -v "^WARNING: Running pip as" | tail -3 |
           tee -a "$log"
         python3 -c "from tklab.toolchain import locate; print('NVRTC', locate.nvrtc_version())" 2>&1 | tee -a "$log" ;;
    notebooks) say "notebooks 07-11"
           python3 -c "import nbval, ipykernel" 2>/dev/null || { say "no nbval here: run the part kit first"; continue; }
           set -f; for nb in ${NOTEBOOKS:-11:11* 10:10* 07-09:0[7-9]*}; do set +f
             # the report's own limits inside this one's, so that it still writes what ran (its doctor step first)
             lim=${NB_LIMIT:-250}
             timeout -s INT "$lim" python3 -m tklab.course.report --skip tests,bench --notebooks "${nb#*:}" \
               --part "nb-${nb%%:*}" --timeout $((lim - 30)) --cell-timeout $((lim - 60)) 2>&1 | tail -14 |
               tee -a "$log"
           done ;;
    host) say "host time of the attention calls"
          timeout -s INT 120 python3 bench/attention_host.py 2>&1 | tail -60 | tee -a "$log" ;;
    bwd-tests) say "backward GPU tests"
         timeout -s INT 330 python3 -m pytest -q -p no:cacheprovider -m "gpu or hopper" tests/test_attention_bwd.py \
           -k "float64_autograd or autograd_function or layouts_and_large or deterministic or remembered" 2>&1 | tail -5 | tee -a "$log"
         timeout -s INT 200 python3 -m tklab check solutions/ch11_flash_bwd/ch11_flash_bwd.cu 2>&1 | tail -12 |
           tee -a "$log" ;;
    bwd) say "backward bench"
         timeout -s INT 300 python3 bench/flash_bwd.py bench --rounds "${BWD_ROUNDS:-3}" --variants \
           "${BWD_VARIANTS:-ch11 default,ch11 uniform}" 2>&1 | grep -v "^  d=" |
           tail -45 | tee -a "$log" ;;
    fwd) say "forward check and bench"
         timeout -s INT 90 python3 bench/flash_fwd.py check --variants "${SPLIT_VARIANTS[@]}" 2>&1 | tail -4 |
           tee -a "$log"
         timeout -s INT 200 python3 bench/flash_fwd.py bench --rounds 2 --variants "ch10 defaults" "${SPLIT_VARIANTS[@]}" \
           2>&1 | grep "^| " | tail -45 | tee -a "$log" ;;
    ncu) say "ncu of the backward"
         WHO="ch11 fa4" timeout 200 bash bench/ncu_flash_bwd.sh 128,8192 64,8192 2>&1 | tee -a "$log"
         WHO=ch11 OPTIONS=DQ_FRAGMENTS=0 timeout 120 bash bench/ncu_flash_bwd.sh 128,8192 2>&1 | tee -a "$log" ;;
    train) say "training"
           timeout -s INT 300 python3 bench/train_tiny_gpt.py --seeds 4 --profile 2>&1 | tail -30 | tee -a "$log" ;;
    planted) say "planted mistakes on the GPU"
             timeout -s INT 250 python3 bench/planted_gpu.py --seeds 1 --only ch11_flash_bwd ch10_flash 2>&1 |
               tail -3 | tee -a "$log" ;;
    check-stages) say "a graded check's stages, timed"
         for sol in solutions/ch10_flash/ch10_flash.cu solutions/ch10_gqa/ch10_gqa.cu; do
           t0=${EPOCHREALTIME/./}  # microseconds
           timeout -s INT 280 python3 -m tklab check "$sol" --stages 2>&1 |
             while IFS= read -r line; do t=$(( (${EPOCHREALTIME/./} - t0) / 100000 )); echo "$((t / 10)).$((t % 10)) s  $line"
             done | grep -E "@@tklab-check-stage|PASSED|FAILED" | tee -a "$log"
         done ;;
    *) echo "unknown part: $part (see the header)" >&2; exit 2 ;;
  esac
done
if [ -n "${OUT:-}" ]; then
  find bench/results -newer "$stamp" -type f | tar -czf "$OUT/results_$(date +%H%M%S).tgz" -T - 2>/dev/null
fi
