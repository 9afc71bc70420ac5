#!/usr/bin/env bash
# The converging study of docs/study.md ("Under the paper's protocol"): ProtoNet conv4 5-way 1-shot on glyphs-hard and
# glyphs-100, constant and step learning rate (cosine with SCHEDULES=cosine), the protocol of
# configs/study/converge_cpu.yaml, nothing tuned for any arm. Runs go to $OUT/<schedule>/<data>__<model>/seed<N>/<arm>/
# in priority order: seed 0 of the baseline and the paper's uniform in every cell first (the schedules in the order
# of $SCHEDULES), then seed 0 of resampling and its placebo, then seeds 1 and 2 of the baseline, the paper's uniform
# and resampling, then seed 0 of the other arms
# ($ARMS). The order only sets what is ready first: every run is a function of its config and seed.
# Resumable: run it again and finished runs are skipped, a stopped one resumes from its last.ckpt
# (scripts/run_scenario.py). The arms: the paper's uniform, its resampling variant, PSIS, and the two placebos.
#   bash scripts/study_converge.sh glyphs_100_5w1s      # one benchmark (a stream of its own; two streams fit 2 cores)
#   bash scripts/study_converge.sh                      # both, one after the other
#   SCHEDULES=cosine bash scripts/study_converge.sh glyphs_100_5w1s   # another schedule: a file of configs/schedules
#   lightning-episodes report studies/converge/step/glyphs_100_5w1s__protonet_euclidean_conv4
# SCHEDULES: constant (Adam 1e-3 throughout), step (configs/study/step_cpu.yaml: halve every 1,000 of the 3,000 steps)
# or the name of any other file of configs/schedules (cosine, linear: annealed to 0 at the 3,000th step).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
OUT=${OUT:-studies/converge}
MODEL=configs/models/protonet_euclidean_conv4.yaml
ARMS=${ARMS:-uniform_online_psis uniform_online_placebo}
SCHEDULES=${SCHEDULES:-constant step}
DATA=("${@:-glyphs_100_5w1s glyphs_hard_5w1s}")
read -r -a DATA <<< "${DATA[*]}"
schedule_config() {  # <schedule>: the config it adds to converge_cpu.yaml (none for constant)
    case $1 in
        constant) ;;
        step) echo configs/study/step_cpu.yaml ;;
        *) echo "configs/schedules/$1.yaml" ;;
    esac
}
for schedule in $SCHEDULES; do
    config=$(schedule_config "$schedule")
    [ -z "$config" ] || [ -f "$config" ] || {
        echo "study_converge.sh: SCHEDULES: $schedule is not constant, step or a file of configs/schedules" >&2
        exit 2; }
done
for data in "${DATA[@]}"; do
    [ -f "configs/data/$data.yaml" ] || { echo "study_converge.sh: no configs/data/$data.yaml" >&2; exit 2; }
done

scenario() {  # <data> <schedule> <seeds> <schemes...>
    local data=$1 schedule=$2 seeds=$3
    shift 3
    # shellcheck disable=SC2046  # paths without spaces: none or one word
    local trainer=(configs/study/converge_cpu.yaml $(schedule_config "$schedule"))
    # shellcheck disable=SC2086
    "$PYTHON" scripts/run_scenario.py --data "configs/data/$data.yaml" --model "$MODEL" --trainer "${trainer[@]}" \
        --online-only --schemes "$@" --seeds $seeds --out "$OUT/$schedule" --launcher "$PYTHON -m lightning_episodes"
}

for schedule in $SCHEDULES; do
    for data in "${DATA[@]}"; do
        scenario "$data" "$schedule" 0 uniform
    done
done
for schedule in $SCHEDULES; do
    for data in "${DATA[@]}"; do
        scenario "$data" "$schedule" 0 uniform_resample uniform_resample_placebo
    done
done
for seed in 1 2; do
    for schedule in $SCHEDULES; do
        for data in "${DATA[@]}"; do
            scenario "$data" "$schedule" "$seed" uniform uniform_resample
        done
    done
done
for schedule in $SCHEDULES; do
    for data in "${DATA[@]}"; do
        # shellcheck disable=SC2086
        scenario "$data" "$schedule" 0 $ARMS
    done
done
