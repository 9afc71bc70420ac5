#!/usr/bin/env bash
# Builds learn2learn 0.2.0 from its source and installs it into a Python environment: what `--data.download true`
# needs to download the paper's datasets (reading their files needs nothing but lightning-episodes itself).
#
#   bash scripts/install_learn2learn.sh [PYTHON]     (default: $PYTHON, else python3 on the PATH; `make learn2learn`)
#
# Its published source does not build on Python 3.11 as it stands (its generated C files predate 3.11): the three
# .pyx sources are cythonized again first. It is installed with --no-deps (its gsutil/qpth/cvxpy requirements are
# never needed here), with the light packages it imports: gym, requests, tqdm. In a checkout, every package is
# installed at the version requirements/constraints.txt locks. Does nothing if learn2learn imports already.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${1:-${PYTHON:-python3}}
if "$PYTHON" -c "import learn2learn" 2>/dev/null; then
    exit 0
fi
constraints=()
[ -f requirements/constraints.txt ] && constraints=(-c requirements/constraints.txt)
pip() { "$PYTHON" -m pip --disable-pip-version-check -q "$@"; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pip install "${constraints[@]}" "cython>=3.0,<4" setuptools wheel gym requests tqdm
pip download learn2learn==0.2.0 --no-deps --no-binary :all: -d "$work"
tar xzf "$work"/learn2learn-0.2.0.tar.gz -C "$work"
src="$work/learn2learn-0.2.0"
for pyx in "$src"/learn2learn/data/{task_dataset,meta_dataset,transforms}.pyx; do
    "$PYTHON" -m cython -3 "$pyx"
done
pip install --no-deps --no-build-isolation "$src"
if ! error=$("$PYTHON" -c "import learn2learn" 2>&1); then
    echo "learn2learn 0.2.0 was installed for $PYTHON but does not import: $(echo "$error" | tail -1)" >&2
    exit 1
fi
echo "learn2learn 0.2.0 installed for $PYTHON"
