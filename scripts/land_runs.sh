#!/usr/bin/env bash
# Copy a campaign's finished runs into a study's records: for every run with a test_results.json under RUNS, the files
# a study keeps (test_results.json, test_episodes.csv, hparams.yaml, config.yaml, the scalars.csv that
# scripts/study_diagnostics.py --export writes, and the run's fit.log from scripts/campaign_worker.sh) go to the same
# relative place under STUDY; checkpoints and event files stay behind. Unfinished runs are not copied.
#   bash scripts/land_runs.sh runs/scarce_dose studies/scarce_dose
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: land_runs.sh RUNS STUDY" >&2; exit 2; }
src=${1%/}; dst=${2%/}
[ -d "$src" ] || { echo "land_runs.sh: no runs folder $src" >&2; exit 2; }
PYTHON=${PYTHON:-.venv/bin/python}
"$PYTHON" "$(dirname "$0")/study_diagnostics.py" "$src" --export > /dev/null
count=0
while read -r record; do
    dir=$(dirname "$record"); rel=${dir#"$src"/}
    mkdir -p "$dst/$rel"
    for file in test_results.json test_episodes.csv hparams.yaml config.yaml scalars.csv; do
        if [ -f "$dir/$file" ]; then cp "$dir/$file" "$dst/$rel/$file"; fi
    done
    run=${rel%/lightning_logs/*}
    if [ -f "$src/$run/fit.log" ]; then cp "$src/$run/fit.log" "$dst/$run/fit.log"; fi
    count=$((count + 1))
done < <(find "$src" -name test_results.json | sort)
echo "land_runs.sh: $count runs from $src into $dst"
