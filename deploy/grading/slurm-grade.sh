#!/bin/bash
# One shard of a class per array task, each on one GPU node: `tklab grade --shard I/N`.
#
#   export CLASS=/shared/course/class RESULTS=/shared/course/grades SHARDS=8
#   sbatch --array=0-$((SHARDS - 1)) --export=ALL deploy/grading/slurm-grade.sh
#   sbatch --dependency=afterok:<that job id> --export=ALL deploy/grading/slurm-merge.sh
#
# (deploy/grading/slurm-submit.sh does both.) CLASS holds one folder per student on a filesystem every node
# sees; each task writes RESULTS/shard-I.csv and its manifest. A task that died is rerun alone with the same
# SHARDS (`sbatch --array=3 ...`): it resumes its sheet. SHARDS is given, not read from Slurm, so such a
# rerun still grades shard 3 of 8. Extra options for grade: GRADE_ARGS (e.g. "--timeout 120").
#SBATCH --job-name=tklab-grade
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=4
#SBATCH --mem=16G
#SBATCH --time=04:00:00
#SBATCH --output=tklab-grade-%A_%a.out
set -euo pipefail
: "${CLASS:?set CLASS to the class folder, one folder per student, on a filesystem every node sees}"
: "${RESULTS:?set RESULTS to the folder for the sheets of the shards and the merged sheet}"
: "${SHARDS:?set SHARDS to the number of shards N, and submit with --array=0-N-1}"
: "${SLURM_ARRAY_TASK_ID:?submit as a job array: sbatch --array=0-N-1}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$RESULTS"
# shellcheck disable=SC2086  # GRADE_ARGS is a list of options
exec "$PYTHON" -m tklab grade --class "$CLASS" --shard "$SLURM_ARRAY_TASK_ID/$SHARDS" \
    --out "$RESULTS/shard-$SLURM_ARRAY_TASK_ID.csv" ${GRADE_ARGS:-}
