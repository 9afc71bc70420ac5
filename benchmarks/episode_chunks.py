"""Evaluation forward on a CPU: the episodes of a batch embedded one at a time (the default) or together, against
learn2learn's conv4 on the same images.

Without autograd on a CPU, the library's backbones embed a batch's episodes one at a time
(``EpisodicBackbone.embeds_episodes_apart``): the same features bit for bit (``tests/models/test_backbones.py``), but
one episode's activations stay in the CPU's caches where a whole batch's do not. This measures the evaluation forward
of the features (ProtoNet's backbone in evaluation mode, running batch-norm statistics, under ``torch.inference_mode``)
on batches of episodes as the validation and test loaders give them:

* ``glyphs``: the data-scarce study's evaluation (``configs/study/scarce_cpu.yaml``): 50 episodes of 5-way 5-shot with
  15 queries per class (100 images of 3×32×32), conv4 with 32 channels;
* ``mini-imagenet``: Mini-ImageNet's shapes, 16 episodes of 100 images of 3×84×84, conv4 with 64 channels.

Contenders, taking turns within each repeat: ``one at a time`` (the default), ``together`` (the batch in one forward,
as before; ``embeds_episodes_apart`` forced ``False``), and learn2learn's ``CNN4Backbone`` of the same width (standard
batch norm in evaluation mode), the batch flattened as its examples do. Episodes per second, medians over repeats.

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.episode_chunks --threads 1
    .venv/bin/python -m benchmarks.episode_chunks --quick      # checks that it runs
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from torch import nn

from benchmarks._timing import machine, median, rates, set_threads, table
from lightning_episodes.models import Conv4

#: shape name -> (episodes in a batch, images per episode, image side, conv4 channels)
SHAPES: dict[str, tuple[int, int, int, int]] = {"glyphs": (50, 100, 32, 32), "mini-imagenet": (16, 100, 84, 64)}


def contenders(episodes: int, images: int, side: int, hidden: int) -> dict[str, Callable[[], int]]:
    """Each contender embeds one batch of ``episodes`` episodes and returns how many it embedded."""
    from learn2learn.vision.models import CNN4Backbone

    batch = torch.randn(episodes, images, 3, side, side, generator=torch.Generator().manual_seed(0))
    ours, together = Conv4(in_channels=3, hidden=hidden).eval(), Conv4(in_channels=3, hidden=hidden).eval()
    together.load_state_dict(ours.state_dict())
    together.embeds_episodes_apart = lambda: False  # type: ignore[method-assign]
    peer: nn.Module = CNN4Backbone(hidden_size=hidden, channels=3, max_pool=True, layers=4).eval()
    with torch.inference_mode():
        assert torch.equal(ours(batch), together(batch))  # the same numbers

    def embedding(module: nn.Module, flat: bool = False) -> Callable[[], int]:
        def work() -> int:
            with torch.inference_mode():
                module(batch.flatten(0, 1) if flat else batch)
            return episodes

        return work

    return {"one at a time": embedding(ours), "together": embedding(together), "learn2learn": embedding(peer, True)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of every contender (default 3)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement (default 3)")
    parser.add_argument("--quick", action="store_true", help="one short repeat of small batches")
    args = parser.parse_args(argv)
    threads = set_threads(args.threads)
    repeats, seconds = (1, 0.2) if args.quick else (args.repeats, args.seconds)
    print(f"before: {machine()}")
    rows = []
    for name, (episodes, images, side, hidden) in SHAPES.items():
        if args.quick:
            episodes, images = 2, 10
        measured = rates(contenders(episodes, images, side, hidden), repeats, seconds, warmup=seconds)
        wall = {contender: median([rate.wall for rate in values]) for contender, values in measured.items()}
        for contender, values in measured.items():
            walls = [rate.wall for rate in values]
            rows.append([
                name, contender, f"{wall[contender]:,.1f}", f"{min(walls):.1f}–{max(walls):.1f}",
                f"{wall[contender] / wall['together']:.2f}x", f"{median([rate.cpu for rate in values]):,.1f}",
            ])  # fmt: skip
    print(f"after: {machine()} ({threads} thread(s))\n")
    header = ["shape", "contender", "episodes/s (median)", "range", "vs together", "episodes/s of CPU time"]
    print(table(header, rows))


if __name__ == "__main__":
    main()
