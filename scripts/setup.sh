#!/usr/bin/env bash
# Creates .venv with everything lightning-episodes needs (runtime + test tools) and installs the
# package in editable mode. Idempotent: a second run with unchanged requirements does nothing.
#
# learn2learn 0.2.0 (the paper's reference implementation) is built from its sdist: its shipped C
# files predate Python 3.11, so the three .pyx sources are re-cythonized first, and it is installed
# with --no-deps (its gsutil/qpth/cvxpy requirements are never needed here). Every package is installed at the
# version requirements/constraints.txt locks (tests/test_environment.py checks them).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
STAMP="$VENV/.lightning-episodes-setup"
want=$(cat requirements/*.txt setup.cfg pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
    exit 0
fi

# a venv whose creation was interrupted has a python but no pip: start it again
if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    rm -rf "$VENV"
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
pip install -c requirements/constraints.txt -r requirements/test.txt

if ! "$VENV/bin/python" -c "import learn2learn" 2>/dev/null; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    pip install -c requirements/constraints.txt "cython>=3.0,<4" setuptools wheel
    pip download learn2learn==0.2.0 --no-deps --no-binary :all: -d "$work"
    tar xzf "$work"/learn2learn-0.2.0.tar.gz -C "$work"
    src="$work/learn2learn-0.2.0"
    for pyx in "$src"/learn2learn/data/{task_dataset,meta_dataset,transforms}.pyx; do
        "$VENV/bin/cython" -3 "$pyx"
    done
    pip install --no-deps --no-build-isolation "$src"
fi

pip install --no-deps --no-build-isolation -e .
echo "$want" > "$STAMP"
