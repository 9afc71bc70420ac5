"""`python -m lightning_episodes`: the same as the `lightning-episodes` console script."""

import sys

from lightning_episodes.console import entry

if __name__ == "__main__":
    sys.exit(entry())
