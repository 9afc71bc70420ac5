# The README's two commands: `make quickstart` and `make test`. Both set everything up first
# (scripts/setup.sh is idempotent: a second run returns at once).
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup quickstart test lint bench docs learn2learn

setup:
	bash scripts/setup.sh

quickstart: setup
	$(BIN)/lightning-episodes fit --config configs/quickstart.yaml
	$(BIN)/lightning-episodes test --config configs/quickstart.yaml --ckpt_path best

lint: setup
	$(BIN)/ruff check lightning_episodes tests benchmarks scripts docs/hooks
	$(BIN)/ruff format --check lightning_episodes tests benchmarks scripts docs/hooks
	$(BIN)/mypy

test: lint
	$(BIN)/pytest --doctest-modules lightning_episodes tests

# the documentation site, into site/ (tests/test_docs.py builds it the same way in `make test`)
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# learn2learn 0.2.0, built from its source for a Python (default: python3 on the PATH, e.g. an activated environment
# where lightning-episodes is installed): only `--data.download true` needs it (`make setup` installs it into .venv)
PYTHON ?= python3
learn2learn:
	bash scripts/install_learn2learn.sh $(PYTHON)
