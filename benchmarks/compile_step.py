"""torch.compile: ProtoNet conv4 training steps, eager against ``torch.compile(backbone)``, on this machine.

One training step is what ``EpisodicModule.training_step`` costs without the Trainer around it: ProtoNet
conv4 (Euclidean) forward on a batch of 5-way 5-shot episodes with 15 queries per class (glyphs-shaped
1×28×28 images by default), the mean episode loss (every weight 1), backward, and an Adam step. Every
contender starts from the same initial weights and steps on the same fixed batch:

* ``eager``: the model as it is;
* ``eager, channels_last``: ``ProtoNet(channels_last=True)`` (for reference: the layout GPUs prefer);
* ``compiled``: ``model.backbone = torch.compile(model.backbone)`` (inductor, default mode);
* ``compiled, max-autotune-no-cudagraphs`` (``--autotune``): the same with that mode.

The first step of a compiled contender compiles its forward and backward graphs; its wall time is
reported separately as the compile time. Then each contender warms up for a few steps and the contenders
take turns within each repeat (a busy moment slows them all alike); the table gives medians over the
repeats of the time per step, by the wall clock and by the process's CPU time, and the ratio to eager.
Before timing, ``torch._dynamo.explain`` counts the graph breaks of the per-episode batch norm
(``EpisodicBatchNorm2d``) in each of its code paths and of the whole backbone.

    .venv/bin/python -m benchmarks.compile_step --threads 1               # 16 episodes/step, 5 repeats
    .venv/bin/python -m benchmarks.compile_step --threads 1 --autotune    # also max-autotune-no-cudagraphs
    .venv/bin/python -m benchmarks.compile_step --threads 1 --quick       # 4 episodes/step, 3 repeats
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo
from torch import nn

from benchmarks._timing import machine, median, rates, set_threads, table
from lightning_episodes import ProtoNet
from lightning_episodes.data.episode import Episode
from lightning_episodes.models import EpisodicBatchNorm2d, build_backbone

WAYS, SHOTS, QUERIES = 5, 5, 15


def batch(episodes: int, channels: int, image_size: int) -> Episode:
    """A fixed batch of normalised random images (the step's cost does not depend on the pixels)."""
    g = torch.Generator().manual_seed(0)
    support = torch.randn(episodes, WAYS * SHOTS, channels, image_size, image_size, generator=g)
    query = torch.randn(episodes, WAYS * QUERIES, channels, image_size, image_size, generator=g)
    return Episode.from_tensors(support, query, WAYS)


def training_step(model: ProtoNet, optimizer: torch.optim.Optimizer, episodes: Episode) -> Callable[[], int]:
    """One forward, backward and Adam step on ``episodes``; returns the number of episodes."""

    def step() -> int:
        optimizer.zero_grad(set_to_none=True)
        model.episode_losses(episodes).losses.mean().backward()
        optimizer.step()
        return len(episodes)

    return step


def graph_breaks(channels: int, image_size: int) -> list[list[str]]:
    """``torch._dynamo.explain`` of the per-episode batch norm's code paths and of the whole backbone."""
    norm = EpisodicBatchNorm2d(64)
    x = torch.randn(4, 20, 64, 7, 7)
    last = x.flatten(0, 1).contiguous(memory_format=torch.channels_last).unflatten(0, (4, 20))
    cases: list[tuple[str, nn.Module, tuple[Any, ...], bool, Callable[[nn.Module], Any]]] = [
        ("batch norm, training, [B, N, C, H, W] (fused kernel)", norm, (x,), True, lambda m: m.train()),
        ("batch norm, training, one episode [N, C, H, W] (MAML)", norm, (x[0],), True, lambda m: m.train()),
        ("batch norm, training, channels_last", norm, (last,), True, lambda m: m.train()),
        ("batch norm, training, bfloat16 input (autocast)", norm, (x.bfloat16(),), True, lambda m: m.train()),
        ("batch norm, evaluation, running statistics", norm, (x,), False, lambda m: m.eval()),
    ]
    backbone = build_backbone("conv4", channels, image_size)
    images = torch.randn(4, 20, channels, image_size, image_size)
    cases += [
        ("conv4 backbone, training", backbone, (images,), True, lambda m: m.train()),
        ("conv4 backbone, evaluation", backbone, (images,), False, lambda m: m.eval()),
    ]
    rows = []
    for name, module, inputs, grad, mode in cases:
        mode(module)
        torch._dynamo.reset()
        with torch.set_grad_enabled(grad):
            explained = torch._dynamo.explain(module)(*inputs)
        reasons = "; ".join(str(r.reason).splitlines()[0][:120] for r in explained.break_reasons) or "—"
        rows.append([name, str(explained.graph_count), str(explained.graph_break_count), reasons])
    torch._dynamo.reset()
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 episodes per step, 3 repeats (a smoke run)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per step (default 16)")
    parser.add_argument("--repeats", type=int, default=None, help="turns of every contender (default 5)")
    parser.add_argument("--channels", type=int, default=1, help="image channels (default 1, as glyphs)")
    parser.add_argument("--image-size", type=int, default=28, help="image side (default 28, as glyphs)")
    parser.add_argument("--autotune", action="store_true", help='also mode="max-autotune-no-cudagraphs"')
    args = parser.parse_args(argv)
    episodes = args.episodes or (4 if args.quick else 16)
    repeats = args.repeats or (3 if args.quick else 5)
    set_threads(args.threads)
    print(f"Before: {machine()}\n")

    print(
        table(
            ["module (train/eval)", "graphs", "graph breaks", "reasons"], graph_breaks(args.channels, args.image_size)
        )
    )

    data = batch(episodes, args.channels, args.image_size)
    torch.manual_seed(0)
    template = ProtoNet(in_channels=args.channels, image_size=args.image_size)
    modes: dict[str, dict[str, Any] | None] = {"eager": None, "eager, channels_last": None, "compiled": {}}
    if args.autotune:
        modes["compiled, max-autotune-no-cudagraphs"] = {"mode": "max-autotune-no-cudagraphs"}
    contenders: dict[str, Callable[[], int]] = {}
    first_step: dict[str, float] = {}
    for name, compile_options in modes.items():
        model = copy.deepcopy(template).train()
        if "channels_last" in name:
            model.use_channels_last()
        if compile_options is not None:
            torch._dynamo.reset()  # each mode compiles from scratch
            model.backbone = torch.compile(model.backbone, **compile_options)  # type: ignore[assignment]
        step = training_step(model, torch.optim.Adam(model.parameters(), lr=1e-3), data)
        start = time.perf_counter()
        step()  # compiles forward and backward (compiled contenders)
        first_step[name] = time.perf_counter() - start
        contenders[name] = step
    # a measurement runs at least 2 steps; warm-up: 2 more steps of each
    measured = rates(contenders, repeats=repeats, seconds=0.0, warmup=0.0)
    print(f"\nAfter:  {machine()}\n")
    print(report(measured, first_step, episodes, repeats, args.channels, args.image_size))


def report(
    measured: dict[str, list[Any]],
    first_step: dict[str, float],
    episodes: int,
    repeats: int,
    channels: int,
    image_size: int,
) -> str:
    def step_ms(rate: float) -> float:
        return 1e3 * episodes / rate

    eager_wall = median([step_ms(r.wall) for r in measured["eager"]])
    eager_cpu = median([step_ms(r.cpu) for r in measured["eager"]])
    rows = []
    for name, values in measured.items():
        wall = [step_ms(r.wall) for r in values]
        cpu = median([step_ms(r.cpu) for r in values])
        compile_s = first_step[name] - median(wall) / 1e3
        rows.append(
            [
                name,
                f"{median(wall):,.0f}",
                f"{min(wall):,.0f}–{max(wall):,.0f}",
                f"{cpu:,.0f}",
                f"{eager_wall / median(wall):.2f}x",
                f"{eager_cpu / cpu:.2f}x",
                f"{first_step[name]:,.1f} s" + (f" ({compile_s:,.1f} s compiling)" if "compiled" in name else ""),
            ]
        )
    header = [
        "contender",
        "step ms (wall)",
        "range",
        "step ms (CPU)",
        "speed-up (wall)",
        "speed-up (CPU)",
        "first step",
    ]
    return (
        f"ProtoNet conv4, {episodes} episodes/step of 5w5s15q {channels}×{image_size}×{image_size} images "
        f"({episodes * WAYS * (SHOTS + QUERIES)} images), forward + backward + Adam; {repeats} repeats of 2 steps "
        "per contender after 2 steps of warm-up.\n\n" + table(header, rows)
    )


if __name__ == "__main__":
    main()
