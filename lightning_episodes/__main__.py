import sys

from lightning_episodes.cli import entry

if __name__ == "__main__":
    sys.exit(entry())
