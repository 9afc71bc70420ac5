"""Training throughput and test accuracy against easyfsl's prototypical networks, on the quickstart's shape.

The quickstart's setting (``configs/quickstart.yaml``): the embedded ``glyphs`` dataset (28×28 grey), ProtoNet with
Euclidean distance on conv4 with 32 channels, 5-way 5-shot with 15 queries per class, 4 episodes a step, Adam at
2e-3. Both contenders train on the very same episodes (the library's data module, assembled and normalised by it) in
this process, with the same number of torch threads:

* ``lightning-episodes``: ``ProtoNet`` through the real ``pl.Trainer`` (no validation, checkpointing or logger),
  ``lightning-episodes, channels_last`` with ``channels_last=True``, and ``lightning-episodes, bf16-mixed +
  channels_last`` with the Trainer's ``precision="bf16-mixed"`` as well (trained and tested in it);
* ``easyfsl``: easyfsl 1.5.0's ``PrototypicalNetworks`` around a conv4-32 of ``nn.BatchNorm2d`` (learn2learn's
  layout and initialisation: easyfsl ships no conv4), trained as its notebooks train it — per episode,
  ``process_support_set`` then ``forward`` on the queries (so its batch norm normalises support and queries with
  separate statistics), the cross-entropy averaged over the step's 4 episodes, one Adam step.

``speed`` (the default): rounds of fits in which the contenders take turns; training episodes per second from the
wall clock between the ends of the measured steps (data loading included), medians over rounds and the ratio to
easyfsl. ``--accuracy``: each contender trained at seeds 0, 1, 2 for the quickstart's 100 steps, then tested on the
library's 1,000 fixed test episodes of unseen alphabets (the library: its own ``test``; easyfsl: ``model.eval()``,
its running batch-norm statistics, as its evaluation does); mean accuracy over the test episodes per seed, the
across-seed mean with its 95% t interval, and each contender's difference from the library in float32, paired by
seed (the same training episodes and initial weights), with its t interval over the seeds.

easyfsl is not a dependency of the library: this script installs it into the running environment with
``pip install --no-deps easyfsl==1.5.0`` on first use (its own requirements — matplotlib, pandas, tqdm — are only
needed by its dataset helpers, which are not used; nothing in its 1.5.0 release needed patching on torch 2.14).

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.easyfsl_fit --threads 1
    .venv/bin/python -m benchmarks.easyfsl_fit --threads 2
    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.easyfsl_fit --threads 1 --accuracy
    .venv/bin/python -m benchmarks.easyfsl_fit --quick          # checks that it runs
"""

from __future__ import annotations

import argparse
import importlib
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from scipy import stats
from torch import nn

from benchmarks._timing import add_round_arguments, machine, median, round_settings, set_threads, table
from lightning_episodes import EpisodicDataModule, ProtoNet

EASYFSL = "easyfsl==1.5.0"
EPISODES, LR, HIDDEN = 4, 2e-3, 32


def easyfsl_classes() -> Any:
    """easyfsl's ``PrototypicalNetworks``, installed on first use (``pip install --no-deps``)."""
    try:
        return importlib.import_module("easyfsl.methods").PrototypicalNetworks
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", EASYFSL], check=True)
        importlib.invalidate_caches()
        return importlib.import_module("easyfsl.methods").PrototypicalNetworks


def plain_conv4(hidden: int = HIDDEN) -> nn.Module:
    """conv4 of ``nn.BatchNorm2d`` with learn2learn's initialisation, flattened features (what easyfsl is given)."""
    layers: list[nn.Module] = []
    for i in range(4):
        conv, norm = nn.Conv2d(1 if i == 0 else hidden, hidden, 3, padding=1), nn.BatchNorm2d(hidden)
        nn.init.xavier_uniform_(conv.weight)
        nn.init.zeros_(conv.bias)
        nn.init.uniform_(norm.weight)
        layers += [conv, norm, nn.ReLU(), nn.MaxPool2d(2)]
    return nn.Sequential(*layers, nn.Flatten())


def data_module(steps: int, seed: int = 0) -> EpisodicDataModule:
    data = EpisodicDataModule(dataset="glyphs", ways=5, shots=5, queries=15, episodes_per_batch=EPISODES,
                              val_episodes=10, test_episodes=1000, eval_episodes_per_batch=10, seed=0,
                              train_seed=seed)  # fmt: skip
    data.setup("fit")
    return data


class Ends(pl.Callback):
    """When each training step ended."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_train_batch_end(self, trainer: pl.Trainer, module: Any, outputs: Any, batch: Any, idx: int) -> None:
        self.ends.append(time.perf_counter())


def _trainer(steps: int, callbacks: list[pl.Callback], precision: str = "32-true") -> pl.Trainer:
    return pl.Trainer(max_steps=steps, limit_val_batches=0, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
                      callbacks=callbacks, precision=precision)  # fmt: skip


def fit_library(
    steps: int, seed: int, channels_last: bool = False, precision: str = "32-true"
) -> tuple[list[float], ProtoNet, EpisodicDataModule]:
    pl.seed_everything(seed, verbose=False)
    data, ends = data_module(steps, seed), Ends()
    model = ProtoNet(in_channels=1, image_size=28, backbone_options={"hidden": HIDDEN}, channels_last=channels_last,
                     optimizer=lambda params: torch.optim.Adam(params, lr=LR))  # fmt: skip
    _trainer(steps, [ends], precision).fit(model, datamodule=data)
    return ends.ends, model, data


def fit_easyfsl(steps: int, seed: int) -> tuple[list[float], nn.Module, EpisodicDataModule]:
    """easyfsl's training loop on the library's episodes (the same batches, normalised by the data module)."""
    pl.seed_everything(seed, verbose=False)
    data = data_module(steps, seed)
    model = easyfsl_classes()(plain_conv4()).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    ends: list[float] = []
    for index, batch in enumerate(data.train_dataloader()):
        if index == steps:
            break
        episodes = data.on_after_batch_transfer(batch, 0)
        optimizer.zero_grad()
        losses = []
        for support, support_labels, query, query_labels in zip(
            episodes.support, episodes.support_labels, episodes.query, episodes.query_labels, strict=True
        ):
            model.process_support_set(support, support_labels)
            losses.append(F.cross_entropy(model(query), query_labels))
        torch.stack(losses).mean().backward()
        optimizer.step()
        ends.append(time.perf_counter())
    return ends, model, data


def test_easyfsl(model: nn.Module, data: EpisodicDataModule) -> float:
    """Mean accuracy (%) over the library's fixed test episodes, with easyfsl's evaluation (``model.eval()``)."""
    data.setup("test")
    model.eval()
    correct = []
    with torch.no_grad():
        for batch in data.test_dataloader():
            episodes = data.on_after_batch_transfer(batch, 0)
            for support, support_labels, query, query_labels in zip(
                episodes.support, episodes.support_labels, episodes.query, episodes.query_labels, strict=True
            ):
                model.process_support_set(support, support_labels)
                correct.append(float((model(query).argmax(-1) == query_labels).float().mean()))
    return 100 * statistics.fmean(correct)


def test_library(model: ProtoNet, data: EpisodicDataModule) -> float:
    """Mean accuracy (%) of the library's ``test``, in the precision the model was trained in."""
    precision = model.trainer.precision if model._trainer is not None else "32-true"
    result = _trainer(1, [], precision).test(model, datamodule=data, verbose=False)[0]
    return 100 * float(result["test/acc"])


BASELINE = "lightning-episodes"
CONTENDERS: dict[str, Callable[[int, int], tuple[list[float], Any, EpisodicDataModule]]] = {
    BASELINE: fit_library,
    "lightning-episodes, channels_last": lambda steps, seed: fit_library(steps, seed, channels_last=True),
    "lightning-episodes, bf16-mixed + channels_last": lambda steps, seed: fit_library(steps, seed, True, "bf16-mixed"),
    "easyfsl": fit_easyfsl,
}


def speed(rounds: int, steps: int, skip: int) -> str:
    rates: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    for _ in range(rounds):
        for name, fit in CONTENDERS.items():
            ends = fit(steps, 0)[0]
            rates[name].append(EPISODES * (len(ends) - 1 - skip) / (ends[-1] - ends[skip]))
    rows = [[name, f"{median(values):.2f}", f"{min(values):.2f}–{max(values):.2f}",
             f"{median(values) / median(rates['easyfsl']):.2f}x"] for name, values in rates.items()]  # fmt: skip
    header = ["contender", "training episodes/s (median)", "range over rounds", "vs easyfsl"]
    return f"{rounds} round(s) of {steps} steps, the first {skip} left out\n\n" + table(header, rows)


def t_interval(values: list[float]) -> str:
    """``mean ± half-width`` of the 95% t interval over ``values`` (one per training)."""
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return f"{statistics.fmean(values):+.2f} ± {half:.2f}"


def accuracy(seeds: list[int], steps: int) -> str:
    found: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    for seed in seeds:
        for name, fit in CONTENDERS.items():
            _, model, data = fit(steps, seed)
            found[name].append((test_easyfsl if name == "easyfsl" else test_library)(model, data))
    rows = []
    for name, values in found.items():
        paired = [value - base for value, base in zip(values, found[BASELINE], strict=True)]
        rows.append([name, ", ".join(f"{v:.2f}" for v in values), t_interval(values).lstrip("+"),
                     "–" if name == BASELINE else t_interval(paired)])  # fmt: skip
    header = ["contender", "test accuracy per seed (%)", "across seeds, 95% t interval", f"− {BASELINE}, by seed"]
    return f"{steps} steps, seeds {seeds}, 1,000 fixed test episodes\n\n" + table(header, rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_round_arguments(parser, steps=40, skip=5)
    parser.add_argument("--accuracy", action="store_true", help="train at seeds 0-2 for 100 steps and test")
    parser.add_argument("--quick", action="store_true", help="1 short round, 2 seeds of 3 steps (checks that it runs)")
    args = parser.parse_args(argv)
    rounds, steps, skip = round_settings(parser, args, quick=(1, 6, 2), min_skip=1)
    threads = set_threads(args.threads)
    easyfsl_classes()
    print(f"before: {machine()}")
    if args.accuracy or args.quick:
        out = accuracy([0, 1] if args.quick else [0, 1, 2], 3 if args.quick else 100)
    if not args.accuracy:
        out = speed(rounds, steps, skip)
    print(f"after: {machine()} ({threads} thread(s))\n")
    print(out)


if __name__ == "__main__":
    main()
