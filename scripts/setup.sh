#!/usr/bin/env bash
# Creates .venv with everything lightning-episodes needs (runtime + test tools) and installs the
# package in editable mode. Idempotent: a second run with unchanged requirements does nothing.
#
# learn2learn 0.2.0 (the paper's reference implementation, which the tests compare against and which downloads the
# paper's datasets) is built from its sdist by scripts/install_learn2learn.sh: its shipped C files predate Python 3.11.
# Every package is installed at the version requirements/constraints.txt locks (tests/test_environment.py checks them).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
STAMP="$VENV/.lightning-episodes-setup"
want=$(cat requirements/*.txt setup.cfg pyproject.toml scripts/setup.sh scripts/install_learn2learn.sh | sha256sum | cut -d' ' -f1)

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

bash scripts/install_learn2learn.sh "$VENV/bin/python"

pip install --no-deps --no-build-isolation -e .
echo "$want" > "$STAMP"
