#!/bin/bash
# After every shard of deploy/grading/slurm-grade.sh finished: one sheet, RESULTS/grades.csv. The merge
# refuses (exit 2, saying which) a missing, duplicated, unfinished or mismatched shard.
#SBATCH --job-name=tklab-merge
#SBATCH --cpus-per-task=1
#SBATCH --mem=2G
#SBATCH --time=00:10:00
#SBATCH --output=tklab-merge-%j.out
set -euo pipefail
: "${RESULTS:?set RESULTS to the folder holding the sheets of the shards}"
: "${SHARDS:?set SHARDS to the number of shards}"
PYTHON="${PYTHON:-python3}"
shards=()
for ((i = 0; i < SHARDS; i++)); do shards+=("$RESULTS/shard-$i.csv"); done
exec "$PYTHON" -m tklab grade-merge --replace --out "$RESULTS/grades.csv" "${shards[@]}"
