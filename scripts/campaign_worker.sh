#!/usr/bin/env bash
# One worker of a study's campaign: takes jobs from a queue file until it is empty, one fit at a time.
# A job is one line: a run folder, then the arguments of `lightning-episodes fit` (split on whitespace, no quoting);
# the folder becomes --trainer.default_root_dir. Lines are taken under a lock (QUEUE.lock), so several workers can
# share one queue (two on a 2-core machine, each with OMP_NUM_THREADS=1). A run folder that holds a test_results.json
# is skipped; one that holds a last.ckpt resumes from it (--ckpt_path last); every job's exit status is appended to
# QUEUE.done; the fit's output (its warnings included) is appended to <run folder>/fit.log as well as printed.
# Killed, it loses nothing: put the job's line back in the queue and start a worker again.
#   OMP_NUM_THREADS=1 nice -n 10 bash scripts/campaign_worker.sh queue.txt &
# PYTHON: the interpreter (default: .venv/bin/python of the folder the worker is started from).
set -uo pipefail
queue=${1:?usage: campaign_worker.sh QUEUE}
[ -f "$queue" ] || { echo "campaign_worker.sh: no queue file $queue" >&2; exit 2; }
PYTHON=${PYTHON:-.venv/bin/python}
take() {  # the queue's first line, removed from it under the lock (empty when the queue is)
    flock "$queue.lock" bash -c 'line=$(head -n 1 "$1"); [ -n "$line" ] && sed -i 1d "$1"; printf "%s" "$line"' _ "$queue"
}
while job=$(take) && [ -n "$job" ]; do
    read -r -a args <<< "$job"
    run=${args[0]}
    if find "$run" -name test_results.json 2>/dev/null | grep -q .; then
        echo "$job # skipped: finished" >> "$queue.done"
        continue
    fi
    resume=()
    find "$run" -name last.ckpt 2>/dev/null | grep -q . && resume=(--ckpt_path last)
    echo "[worker $$] $(date -u +%FT%TZ) start $run ${resume[*]}"
    mkdir -p "$run"
    "$PYTHON" -m lightning_episodes fit "${args[@]:1}" --trainer.default_root_dir="$run" "${resume[@]}" 2>&1 |
        tee -a "$run/fit.log"
    rc=${PIPESTATUS[0]}
    echo "[worker $$] $(date -u +%FT%TZ) rc=$rc $run"
    echo "$job # rc=$rc" >> "$queue.done"
done
