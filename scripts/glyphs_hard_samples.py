#!/usr/bin/env python
"""Draw sample 5-way episodes of the ``glyphs-hard`` test split beside ``glyphs``' images of the same classes.

    python scripts/glyphs_hard_samples.py --output docs/glyphs_hard_episodes.png

Each panel is one episode of test classes: a row per class, the class's ``glyphs`` image (the clean character,
for reference), then its support image and query images in ``glyphs-hard``. Both datasets are rendered (or read
from the cache) with their defaults.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from lightning_episodes.data.datasets import load_dataset  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("docs/glyphs_hard_episodes.png"))
    parser.add_argument("--episodes", type=int, default=2, help="panels side by side")
    parser.add_argument("--ways", type=int, default=5)
    parser.add_argument("--queries", type=int, default=5, help="query images shown per class")
    parser.add_argument("--seed", type=int, default=0, help="which classes and images are drawn")
    args = parser.parse_args(argv)
    hard, plain = load_dataset("glyphs-hard"), load_dataset("glyphs")
    if hard.class_names != plain.class_names:
        raise SystemExit("glyphs and glyphs-hard disagree on the classes: render both with the same fonts")
    groups = hard.groups or [""] * hard.num_classes
    rng = np.random.default_rng(args.seed)
    columns = 2 + args.queries
    figure, axes = plt.subplots(
        args.ways, args.episodes * columns, figsize=(0.9 * args.episodes * columns, 0.95 * args.ways), squeeze=False
    )
    for episode in range(args.episodes):
        classes = rng.choice(hard.splits["test"], args.ways, replace=False)
        for way, k in enumerate(classes):
            rows = np.flatnonzero(hard.labels.numpy() == k)
            picks = rng.choice(rows, 1 + args.queries, replace=False)
            images = [plain.images[rows[0], 0].numpy()] + [hard.images[i].permute(1, 2, 0).numpy() for i in picks]
            for j, image in enumerate(images):
                ax = axes[way, episode * columns + j]
                ax.imshow(image, cmap="gray" if image.ndim == 2 else None, interpolation="nearest")
                ax.set_xticks([])
                ax.set_yticks([])
                if way == 0:
                    ax.set_title(["glyphs", "support", *["query"] * args.queries][j], fontsize=7)
            axes[way, episode * columns].set_ylabel(f"{hard.class_names[k]} ({groups[k]})"[:18], fontsize=6)
    figure.suptitle("glyphs-hard: 5-way 1-shot test episodes (left column: the same class in glyphs)", fontsize=9)
    figure.tight_layout()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
