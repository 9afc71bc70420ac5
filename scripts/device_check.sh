#!/usr/bin/env bash
# One GPU run (at most ~8.5 minutes, expected ~5, on one H100/H200) of what a CPU cannot check (issue 25):
#   1. the CUDA tests: graphed vs eager parameters for every weighting arm (tests/algorithms/test_cuda_graphs.py),
#      no synchronisation between the guard's reads with and without CUDA graphs (tests/callbacks/test_host_sync.py),
#      the weighting parts on CUDA (tests/weighting/test_weighting_devices.py);
#   2. the step-overhead table, eager and with cuda_graphs (benchmarks/step_overhead.py);
#   3. the Mini-ImageNet-shaped fit against learn2learn's ProtoNet loop (benchmarks/miniimagenet_fit.py).
# Everything it writes lands in $OUT (the device tool brings it back): tests.log, step_overhead.md,
# miniimagenet.md, env.txt and device_check.tgz with all of them.
#
# Prepare, here, once, in the repository root (~8 MB, ignored by git):
#   echo /.whl/ >> "$(git rev-parse --git-common-dir)/info/exclude"
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#       -d .whl jsonargparse==4.53.0 docstring-parser typeshed-client importlib-resources
#   python3 -m pip download --no-deps --no-binary :all: -d .whl learn2learn==0.2.0   # its sdist, built there
# Run there (the device tool): command "bash scripts/device_check.sh", carry [".whl"], timeout_s 560.
# Dry run here (CPU, tiny sizes, no wheels): DEVICE_CHECK_DRY=1 PYTHON=.venv/bin/python bash scripts/device_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=${DEVICE_CHECK_DRY:-0}
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
start=$SECONDS
stamp() { echo "== $(( SECONDS - start )) s: $*" | tee -a "$OUT/env.txt"; }

if [ "$DRY" = 1 ]; then
    export PYTHONPATH=$PWD
    tests_k="cuda or refused or cpu"
    overhead=(--device cpu --quick --only ess)
    mini=(--quick)
else
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
    # learn2learn 0.2.0 from its sdist: its shipped C files predate Python 3.11, so cythonize its three .pyx again
    build_learn2learn() {
        local work src pyx
        work=$(mktemp -d) && tar xzf .whl/learn2learn-0.2.0.tar.gz -C "$work" || return 1
        src="$work/learn2learn-0.2.0"
        for pyx in "$src"/learn2learn/data/{task_dataset,meta_dataset,transforms}.pyx; do
            "$PY" -m cython -3 "$pyx" || return 1
        done
        "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site "$src"
    }
    if build_learn2learn >"$OUT/learn2learn_build.log" 2>&1; then
        stamp "learn2learn built"
    else
        stamp "learn2learn did not build (see learn2learn_build.log): the 84 px table has our rows only"
    fi
    tests_k="cuda"
    overhead=(--device cuda --hidden 64 --steps 300 --skip 30 --rounds 1 --only ess --cuda-graphs)
    mini=(--device cuda --steps 40 --skip 8 --cuda-graphs)
fi

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU"
    "$PY" -c "import torch, pytorch_lightning as pl; print('torch', torch.__version__, 'lightning', pl.__version__)"
    git log --oneline -1 2>/dev/null || true
} >>"$OUT/env.txt" 2>&1
stamp "setup done"

timeout 150 "$PY" -m pytest -q -rA -s -p no:cacheprovider -k "$tests_k" \
    tests/algorithms/test_cuda_graphs.py tests/callbacks/test_host_sync.py tests/weighting/test_weighting_devices.py \
    >"$OUT/tests.log" 2>&1
stamp "tests: exit $? ($(tail -1 "$OUT/tests.log"))"

timeout 150 "$PY" -m benchmarks.step_overhead "${overhead[@]}" >"$OUT/step_overhead.md" 2>"$OUT/step_overhead.err"
stamp "step overhead: exit $?"

timeout 180 "$PY" -m benchmarks.miniimagenet_fit "${mini[@]}" >"$OUT/miniimagenet.md" 2>"$OUT/miniimagenet.err"
stamp "84 px comparison: exit $?"

tail -c 20000 "$OUT/step_overhead.err" >"$OUT/step_overhead.err.tail" && rm -f "$OUT/step_overhead.err"
tail -c 20000 "$OUT/miniimagenet.err" >"$OUT/miniimagenet.err.tail" && rm -f "$OUT/miniimagenet.err"
(cd "$OUT" && tar czf device_check.tgz ./*.log ./*.md ./*.txt ./*.tail && rm -f ./*.tail learn2learn_build.log)
tail -30 "$OUT/tests.log"
cat "$OUT/step_overhead.md" "$OUT/miniimagenet.md" "$OUT/env.txt"
