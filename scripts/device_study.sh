#!/usr/bin/env bash
# One lent GPU's run of the study at the paper's protocol (issue 46, item 1): the next unfinished pair (baseline and
# uniform, online) of the cells where the paper reports its gains, in priority order, as parallel fits on the one GPU,
# ended by a deadline so that both test their best checkpoint and the records come back inside the loan.
#
# Protocol: configs/trainer/gpu.yaml + configs/study/paper_gpu.yaml at a constant rate (Adam 1e-3, as the paper; it
# names no schedule), 20,000 steps of 16 episodes x 15 queries, conv4-64, validation every 1,000 steps on 1,000
# episodes, the best tested on 1,000; the step graphed (--model.cuda_graphs, which ends with the eager fit's
# parameters: tests/algorithms/test_cuda_graphs.py, run here first) and, if a graphed fit fails, eager.
# Cells (CELLS, one "data model seed" a line, first unfinished first): glyphs-100 5-way 5-shot ProtoNet-cosine seeds
# 0-2, then ProtoNet-Euclidean seeds 0-2, then 5-way 1-shot ProtoNet-Euclidean seeds 0-2. Records land in
# $STUDY/<data>__<model>/seed<N>/<arm> (default studies/paper_gpu/constant), read by `lightning-episodes report` and
# `compare`; a pair whose two runs hold a test record is skipped, so each loan lands the next pair.
#
# Prepare, here, once, in the repository root (~1 MB, ignored by git), the wheels the device lacks:
#   echo /.whl/ >> "$(git rev-parse --git-common-dir)/info/exclude"
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#       -d .whl jsonargparse==4.53.0 docstring-parser typeshed-client importlib-resources
# Run there (the device tool): command "bash scripts/device_study.sh", carry [".whl"], timeout_s 600. Then here:
#   tar xzf <files_at>/records.tgz          # the pair's records, into $STUDY
#   lightning-episodes report studies/paper_gpu
#   lightning-episodes compare studies/paper_gpu/constant/<data>__<model> --treatment uniform_online
# Dry run (CPU, tiny sizes, no wheels; what the test suite runs):
#   DEVICE_STUDY_DRY=1 PYTHON=.venv/bin/python STUDY=/tmp/study OUT=/tmp/out bash scripts/device_study.sh
#
# BUDGET_S: seconds from this script's start by which the records must be packed (default 570, inside the tool's
# 600 s call; on 2026-11-28 a fit's test and the packing took under 40 s after its guard); OUT: where the files to bring back go (records.tgz, logs.tgz, summary.txt; the tool sets it).
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=${DEVICE_STUDY_DRY:-0}
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d)}
STUDY=${STUDY:-studies/paper_gpu/constant}
BUDGET_S=${BUDGET_S:-570}
CELLS=${CELLS:-"glyphs_100_5w5s protonet_cosine_conv4 0
glyphs_100_5w5s protonet_cosine_conv4 1
glyphs_100_5w5s protonet_cosine_conv4 2
glyphs_100_5w5s protonet_euclidean_conv4 0
glyphs_100_5w5s protonet_euclidean_conv4 1
glyphs_100_5w5s protonet_euclidean_conv4 2
glyphs_100_5w1s protonet_euclidean_conv4 0
glyphs_100_5w1s protonet_euclidean_conv4 1
glyphs_100_5w1s protonet_euclidean_conv4 2"}
ARMS="baseline_online uniform_online"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
deadline=$(( $(date +%s) + BUDGET_S - 25 ))  # 25 s to export the scalars and pack the records
start=$SECONDS
summary="$OUT/summary.txt"
stamp() { echo "== $(( SECONDS - start )) s: $*" >>"$summary"; }

done_run() { compgen -G "$1/*/*/test_results.json" > /dev/null; }
next=""
while read -r data model seed; do
    [ -n "$data" ] || continue
    folder="$STUDY/${data}__$model/seed$seed"
    for arm in $ARMS; do
        done_run "$folder/$arm" || { next="$data $model $seed"; break 2; }
    done
done <<< "$CELLS"
[ -n "$next" ] || { echo "every cell of CELLS has its pair: nothing to run"; exit 0; }
read -r data model seed <<< "$next"
folder="$STUDY/${data}__$model/seed$seed"

if [ "$DRY" = 1 ]; then
    export PYTHONPATH=$PWD
    steps=4
    fast=""
    extra="--trainer.accelerator=cpu --data.device_cache=false --data.episodes_per_batch=1 --data.queries=2
        --data.eval_queries=2 --data.val_episodes=4 --data.test_episodes=4 --data.eval_episodes_per_batch=4
        --trainer.val_check_interval=2 --model.init_args.backbone_options.hidden=4"
else
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site:$PWD
    steps=20000
    fast="--model.cuda_graphs=true"
    extra=""
fi
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU"
    "$PY" -c "import torch, pytorch_lightning as pl; print('torch', torch.__version__, 'lightning', pl.__version__)"
    git log --oneline -1 2>/dev/null || true
    echo "cell: $data $model seed $seed; arms: $ARMS; deadline in $(( deadline - $(date +%s) )) s"
} >>"$summary" 2>&1
# graphed against eager on this GPU (skipped on a CPU), beside the fits: a minute of a shared GPU
timeout 150 "$PY" -m pytest -q -rA -s -p no:cacheprovider -k "graphed_fit" tests/algorithms/test_cuda_graphs.py \
    >"$OUT/cuda_graphs_tests.log" 2>&1 &
tests_pid=$!

study() {  # the pair's unfinished arms, ended by the deadline
    DATA=$data MODEL=$model SEEDS=$seed ARMS=$ARMS SCHEDULE=constant STEPS=$steps OUT=$STUDY DEADLINE=$deadline \
        RESERVE_S=${RESERVE_S:-50} PYTHON=$PY LAUNCHER="$PY -m lightning_episodes" EXTRA="$extra $1" \
        bash scripts/study_gpu.sh
}
stamp "setup done; fitting $folder ($fast)"
if ! study "$fast"; then
    stamp "a fit failed ($(tail -3 "$folder"/*.log | tr '\n' ' ' | cut -c1-400))"
    for arm in $ARMS; do  # a failed run's partial logs go, so that the eager run is version_0 of its folder
        done_run "$folder/$arm" || { mkdir -p "$OUT/failed"; cp "$folder/$arm.log" "$OUT/failed/" 2>/dev/null
                                     rm -rf "${folder:?}/$arm"; }
    done
    [ -n "$fast" ] && { stamp "again without $fast"; study "" || stamp "an eager fit failed too"; }
fi
wait "$tests_pid"
stamp "cuda graph tests: exit $? ($(tail -1 "$OUT/cuda_graphs_tests.log"))"
for arm in $ARMS; do
    record=$(compgen -G "$folder/$arm/*/*/test_results.json" | head -1)
    [ -n "$record" ] && "$PY" - "$record" "$arm" <<'PY' >>"$summary"
import json, sys
r = json.load(open(sys.argv[1]))
acc, ci = 100 * r["accuracy"], 100 * r["ci95"]
print(f"{sys.argv[2]}: test {acc:.2f} +- {ci:.2f} at global step {r['global_step']}, checkpoint {r.get('ckpt_path')}")
PY
done
"$PY" scripts/study_diagnostics.py --export "$STUDY/${data}__$model" >>"$summary" 2>&1
tar czf "$OUT/records.tgz" --exclude='*/checkpoints' --exclude='events.out.tfevents.*' --exclude='*.log' "$folder"
tar czf "$OUT/logs.tgz" "$folder"/*.log "$OUT"/failed 2>/dev/null
stamp "packed $(tar tzf "$OUT/records.tgz" | grep -c test_results.json) test records"
cat "$summary"
