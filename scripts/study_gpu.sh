#!/usr/bin/env bash
# The study at the paper's batch on one GPU: the four arms of a seed as parallel fits on the same GPU (a conv4 fit
# alone leaves most of an H100/H200 idle), each exactly the fit scripts/run_scenario.py runs for that arm, with
# configs/trainer/gpu.yaml and configs/study/paper_gpu.yaml (16 episodes x 15 queries, conv4-64, data on the GPU).
# Runs go where run_scenario puts them, so `lightning-episodes report|compare` and run_scenario's resume read them;
# a seed whose four runs hold a test record is skipped.
#
#   DATA=glyphs_hard_5w1s SEEDS="0 1" STEPS=5000 bash scripts/study_gpu.sh
#   lightning-episodes report runs/paper_gpu
#   DATA=glyphs_100_5w1s SEEDS=0 STEPS=20000 SCHEDULE=step ARMS="baseline_online uniform_online" \
#       OUT=studies/paper_gpu/step bash scripts/study_gpu.sh
#
# DATA: a file of configs/data without .yaml (default glyphs_hard_5w1s); MODEL: a file of configs/models without .yaml
# (default protonet_euclidean_conv4); SEEDS (default "0 1 2"); STEPS: max_steps (default: paper_gpu.yaml's 20,000);
# MAX_TIME: a guard, DD:HH:MM:SS, after which a fit stops and tests what it has (default none); DEADLINE: a Unix time
# by which every fit must have ended, its test included (a lent GPU's end): each fit gets the guard that leaves it
# RESERVE_S seconds (default 90) to start and test, and a fit with no time left is not started; OUT (default
# runs/paper_gpu); LAUNCHER (default "python -m lightning_episodes"); PYTHON (default python); EXTRA: more arguments
# for every fit (e.g. "--trainer.accelerator=cpu --data.device_cache=false" to try it).
set -uo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-glyphs_hard_5w1s}
SEEDS=${SEEDS:-0 1 2}
OUT=${OUT:-runs/paper_gpu}
LAUNCHER=${LAUNCHER:-python -m lightning_episodes}
MODEL=${MODEL:-protonet_euclidean_conv4}
ARMS=${ARMS:-baseline_online uniform_online uniform_online_psis uniform_online_placebo}
SCHEDULE=${SCHEDULE:-constant}
[ -f "configs/data/$DATA.yaml" ] || { echo "study_gpu.sh: DATA=$DATA: no configs/data/$DATA.yaml" >&2; exit 2; }
[ -f "configs/models/$MODEL.yaml" ] || { echo "study_gpu.sh: MODEL=$MODEL: no configs/models/$MODEL.yaml" >&2; exit 2; }
for arm in $ARMS; do
    [ -f "configs/sampling/$arm.yaml" ] || { echo "study_gpu.sh: ARMS: no configs/sampling/$arm.yaml" >&2; exit 2; }
done
extra=()
if [ "$SCHEDULE" != constant ]; then
    [ -f "configs/schedules/$SCHEDULE.yaml" ] || {
        echo "study_gpu.sh: SCHEDULE=$SCHEDULE: constant or a file of configs/schedules without .yaml" >&2; exit 2; }
    extra+=(--config "configs/schedules/$SCHEDULE.yaml")
fi
[ -n "${STEPS:-}" ] && extra+=("--trainer.max_steps=$STEPS")
[ -n "${MAX_TIME:-}" ] && extra+=("--trainer.max_time=$MAX_TIME")
[[ "${DEADLINE:-0}" =~ ^[0-9]+$ ]] || { echo "study_gpu.sh: DEADLINE=$DEADLINE: a Unix time in seconds" >&2; exit 2; }
# the --trainer.max_time that ends a fit started now by DEADLINE, RESERVE_S before it (fails when none is left)
deadline_guard() {
    local left=$(( DEADLINE - $(date +%s) - ${RESERVE_S:-90} ))
    [ "$left" -gt 0 ] || return 1
    printf -- '--trainer.max_time=00:%02d:%02d:%02d' $(( left / 3600 )) $(( left % 3600 / 60 )) $(( left % 60 ))
}
read -r -d "" -a more <<< "${EXTRA:-}"  # every word, over several lines too
extra+=("${more[@]}")
# render (or check) the dataset's cache once, before parallel fits would race to write it
${PYTHON:-python} - "$DATA" <<'PY' || exit 1
import sys, yaml
from lightning_episodes.data.datasets import load_dataset
args = yaml.safe_load(open(f"configs/data/{sys.argv[1]}.yaml"))["data"]["init_args"]
load_dataset(args["dataset"], image_size=args["image_size"], channels=args["channels"])
PY
failed=0
for seed in $SEEDS; do
    folder="$OUT/${DATA}__$MODEL/seed$seed"
    pids=()
    for arm in $ARMS; do
        if compgen -G "$folder/$arm/*/*/test_results.json" > /dev/null; then
            echo "[study_gpu] $folder/$arm is done: skipped" >&2
            continue
        fi
        guard=()
        if [ "${DEADLINE:-0}" != 0 ]; then
            guard=("$(deadline_guard)") || {
                echo "[study_gpu] $folder/$arm: no time left before DEADLINE" >&2; failed=1; continue; }
        fi
        mkdir -p "$folder/$arm"
        $LAUNCHER fit --config "configs/data/$DATA.yaml" --config "configs/models/$MODEL.yaml" \
            --config configs/trainer/gpu.yaml --config configs/study/paper_gpu.yaml \
            --config "configs/sampling/$arm.yaml" --seed_everything="$seed" --data.train_seed="$seed" \
            --trainer.default_root_dir="$folder/$arm" --test_after_fit=true "${extra[@]}" "${guard[@]}" \
            > "$folder/$arm.log" 2>&1 &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
done
[ "$failed" = 0 ] || echo "[study_gpu] a fit failed: see $OUT/*/seed*/<arm>.log" >&2
exit "$failed"
