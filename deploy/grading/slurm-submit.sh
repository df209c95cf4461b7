#!/bin/bash
# Submit the grading of a class: SHARDS array tasks (one GPU each), then the merge once all succeeded.
#   CLASS=/shared/course/class RESULTS=/shared/course/grades SHARDS=8 bash deploy/grading/slurm-submit.sh
set -euo pipefail
: "${CLASS:?}" "${RESULTS:?}" "${SHARDS:?}"
here="$(cd "$(dirname "$0")" && pwd)"
job=$(sbatch --parsable --array="0-$((SHARDS - 1))" --export=ALL "$here/slurm-grade.sh")
merge=$(sbatch --parsable --dependency="afterok:${job%%;*}" --export=ALL "$here/slurm-merge.sh")
echo "grading: job array $job ($SHARDS shards); merge: job $merge -> $RESULTS/grades.csv"
