"""The training forward and backward of conv4 with per-episode batch norm on a CPU, against a plain per-episode loop.

Per-episode batch norm (``EpisodicBatchNorm2d``) normalises every episode with its own statistics, as forwarding the
episodes one by one through ``nn.BatchNorm2d`` would. This measures what it costs where every training step pays it:
conv4's forward and backward on a batch of episodes (the quickstart's shape: 4 episodes of 5-way 5-shot with 15 queries
per class, 100 images of 1×28×28, 32 channels; ``--shape scarce``: the data-scarce study's, 4 episodes of 50 images
of 3×32×32), with autograd and the batch norms training (running statistics updated), in four settings: float32,
float32 with ``channels_last``, bfloat16 autocast, bfloat16 autocast with ``channels_last``.

Contenders, taking turns within each repeat:

* ``library``: ``lightning_episodes.models.Conv4`` as a training step calls it (on a CPU its ``forward`` embeds one
  episode at a time, each batch norm one fused kernel, the running statistics updated once for the batch);
* ``library, batched``: the same module with the episodes forwarded together (``embeds_episodes_apart`` forced
  ``False``: each batch norm loops over the episodes of the ``[B * N, C, H, W]`` activations);
* ``plain loop``: the simplest correct code, a conv4 of ``nn.BatchNorm2d`` (the same widths, learn2learn's layout)
  run episode by episode and stacked, as learn2learn's and easyfsl's training loops do.

Milliseconds per forward + backward (median over repeats) and the ratio to the plain loop (below 1: faster).

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.batchnorm --threads 1
    .venv/bin/python -m benchmarks.batchnorm --quick      # checks that it runs
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from torch import nn

from benchmarks._timing import machine, median, rates, set_threads, table
from lightning_episodes.models import Conv4

#: shape name -> (episodes, images per episode, channels, image side, conv4 channels)
SHAPES: dict[str, tuple[int, int, int, int, int]] = {"quickstart": (4, 100, 1, 28, 32), "scarce": (4, 50, 3, 32, 32)}
#: setting name -> (bfloat16 autocast, channels_last)
SETTINGS: dict[str, tuple[bool, bool]] = {
    "float32": (False, False),
    "float32 + channels_last": (False, True),
    "bf16": (True, False),
    "bf16 + channels_last": (True, True),
}


def plain_conv4(channels: int, hidden: int) -> nn.Module:
    layers: list[nn.Module] = []
    for i in range(4):
        layers += [nn.Conv2d(channels if i == 0 else hidden, hidden, 3, padding=1), nn.BatchNorm2d(hidden)]
        layers += [nn.ReLU(), nn.MaxPool2d(2)]
    return nn.Sequential(*layers, nn.Flatten())


def contenders(shape: tuple[int, int, int, int, int], bf16: bool, channels_last: bool) -> dict[str, Callable[[], int]]:
    """Each contender runs one forward + backward of the batch and returns the number of episodes (1 call = 1 step)."""
    episodes, images, channels, side, hidden = shape
    batch = torch.randn(episodes, images, channels, side, side, generator=torch.Generator().manual_seed(0))
    layout = torch.channels_last if channels_last else torch.contiguous_format
    library, batched = Conv4(in_channels=channels, hidden=hidden), Conv4(in_channels=channels, hidden=hidden)
    batched.load_state_dict(library.state_dict())
    batched.embeds_episodes_apart = lambda: False  # type: ignore[method-assign]
    plain = plain_conv4(channels, hidden)
    for module in (library, batched, plain):
        module.train().to(memory_format=layout)
    library.channels_last = batched.channels_last = channels_last

    def plain_forward(x: torch.Tensor) -> torch.Tensor:
        return torch.stack([plain(episode.contiguous(memory_format=layout)) for episode in x])

    def step(forward: Callable[[torch.Tensor], torch.Tensor], module: nn.Module) -> Callable[[], int]:
        def work() -> int:
            module.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                features = forward(batch)
            features.float().square().mean().backward()
            return 1

        return work

    return {
        "library": step(library, library),
        "library, batched": step(batched, batched),
        "plain loop": step(plain_forward, plain),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of every contender (default 5)")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per measurement (default 2)")
    parser.add_argument(
        "--shape", choices=sorted(SHAPES), default="quickstart", help="batch shape (default quickstart)"
    )
    parser.add_argument("--quick", action="store_true", help="one short repeat of a small batch")
    args = parser.parse_args(argv)
    threads = set_threads(args.threads)
    repeats, seconds = (1, 0.1) if args.quick else (args.repeats, args.seconds)
    shape = (2, 10, *SHAPES[args.shape][2:]) if args.quick else SHAPES[args.shape]
    print(f"before: {machine()}")
    rows, float32_plain = [], None
    for setting, (bf16, channels_last) in SETTINGS.items():
        measured = rates(contenders(shape, bf16, channels_last), repeats, seconds, warmup=seconds)
        ms = {name: 1000 / median([rate.wall for rate in values]) for name, values in measured.items()}
        float32_plain = float32_plain or ms["plain loop"]
        for name, values in measured.items():
            walls = sorted(1000 / rate.wall for rate in values)
            rows.append([
                setting, name, f"{ms[name]:.0f}", f"{walls[0]:.0f}–{walls[-1]:.0f}",
                f"{ms[name] / ms['plain loop']:.2f}x", f"{float32_plain / ms[name]:.2f}x",
            ])  # fmt: skip
    print(f"after: {machine()} ({threads} thread(s)), shape {args.shape} {shape}\n")
    header = ["setting", "contender", "ms per step (median)", "range", "vs plain loop", "speed-up vs float32 plain"]
    print(table(header, rows))


if __name__ == "__main__":
    main()
