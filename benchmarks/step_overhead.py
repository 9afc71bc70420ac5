"""Per-step overhead of the real ``Trainer`` step beyond a bare PyTorch loop, without and with difficulty weighting.

The same model (ProtoNet on conv4; ``--hidden 2`` by default: a near-free backbone, so that what is measured is
the host's work around the kernels), the same batches and the same optimiser (Adam, lr 1e-3), in one process:

* ``bare loop``: batch -> ``on_after_batch_transfer`` (the data module's assembly into float episodes) ->
  ``episode_losses`` -> mean -> backward -> Adam, in a Python ``for`` loop;
* ``Trainer``: ``trainer.fit`` with a CSV logger and ``log_every_n_steps`` as given (default 50, Lightning's
  default), no validation, no checkpointing, no progress bar; the ``NonFiniteGuard`` of every CLI run included;
* ``Trainer + <target>/<proposal>/<normalization>``: the same with a ``DifficultyWeightingCallback`` whose warm-up
  is the ``--skip`` steps left out, so the measured steps run the weighted path (its check of the proposal's fit
  then runs every ``--skip`` steps: every ``warmup_steps``, 100 by default).

Every contender trains from the same initial weights on the same pre-drawn batches (the data module's training
loader, drawn once: the episode sampler's own cost is left out of every contender alike). The contenders take
turns within each round (a busy moment slows all of them alike). Each fit's first ``--skip`` steps are left out;
the table gives the median step time (a typical step, which does not log), the mean (logging steps included:
the amortised cost) and both minus the bare loop's: the overhead. On CUDA a step ends when its kernels do
(``torch.cuda.synchronize`` at the first and last measured step only, so that the host runs ahead as it does in
training) and the mean gives episodes/s; there the compute timers time the host's launches only, so episodes/s
is the measure. ``--cuda-graphs`` adds the same contenders with ``ProtoNet(cuda_graphs=True)`` (and a bare loop
replaying the same graphs): their replays run outside the compute timers, so only their episodes/s compare.

    .venv/bin/python -m benchmarks.step_overhead                       # one thread, conv4 hidden 2, 3 rounds
    .venv/bin/python -m benchmarks.step_overhead --hidden 64           # the paper's conv4
    .venv/bin/python -m benchmarks.step_overhead --device cuda --hidden 64 --steps 600
    .venv/bin/python -m benchmarks.step_overhead --device cuda --hidden 64 --cuda-graphs --only ess  # + graphed
    .venv/bin/python -m benchmarks.step_overhead --quick               # checks that it runs
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytorch_lightning as pl
import torch
from lightning_fabric.utilities.apply_func import move_data_to_device

from benchmarks._timing import add_round_arguments, machine, median, round_settings, set_threads, table
from lightning_episodes import EpisodicDataModule, ProtoNet
from lightning_episodes.algorithms.base import default_optimizer
from lightning_episodes.algorithms.graphs import GraphedLosses
from lightning_episodes.callbacks import DifficultyWeightingCallback, NonFiniteGuard

#: (target, proposal, normalization) of the weighted contenders
WEIGHTED = [
    ("uniform", "normal", "ess"),
    ("uniform", "lognormal", "ess"),
    ("uniform", "empirical", "ess"),
    ("uniform", "normal", "self"),
    ("uniform", "normal", "truncated"),
    ("uniform", "normal", "running"),
    ("uniform", "normal", "psis"),
]


class Compute:
    """Seconds spent in the model's own work (``episode_losses``, backward, Adam's update) per step, and in the
    ``NonFiniteGuard`` and the weighting callback: a step's wall time minus its compute is the host's work
    around the kernels, measured step by step, so that a busy machine slowing the kernels does not hide it."""

    def __init__(self) -> None:
        self.compute, self.guard, self.weighting = 0.0, 0.0, 0.0
        self.marks: list[tuple[float, float, float]] = []

    def mark(self) -> None:
        self.marks.append((self.compute, self.guard, self.weighting))

    def timed(self, function: Callable[..., Any], field: str) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                setattr(self, field, getattr(self, field) + time.perf_counter() - start)

        return wrapper


TIMES = Compute()


@contextlib.contextmanager
def timers() -> Iterator[None]:
    """Times Adam's update, the guard and the weighting callback's per-step hooks in every contender."""
    patches = [
        (importlib.import_module("torch.optim.adam"), "adam", "compute"),
        (NonFiniteGuard, "on_before_optimizer_step", "guard"),
        (DifficultyWeightingCallback, "episode_weights", "weighting"),
        (DifficultyWeightingCallback, "on_train_batch_end", "weighting"),
    ]
    saved = [getattr(owner, name) for owner, name, _ in patches]
    for owner, name, field in patches:
        setattr(owner, name, TIMES.timed(getattr(owner, name), field))
    try:
        yield
    finally:
        for (owner, name, _), original in zip(patches, saved, strict=True):
            setattr(owner, name, original)


class FixedBatches(EpisodicDataModule):
    """The data module, serving the same pre-drawn training batches to every contender."""

    batches: list[Any]

    def train_dataloader(self) -> Any:
        return Batches(self.batches)


class Batches:
    """An iterable of batches (a bare list would be taken for several loaders)."""

    def __init__(self, batches: list[Any]) -> None:
        self.batches = batches

    def __iter__(self) -> Any:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class Clock(pl.Callback):
    """Times at which the training steps end (synchronised with the device at the first and last measured one)."""

    def __init__(self, skip: int, steps: int) -> None:
        self.skip, self.steps, self.ends = skip, steps, []  # type: ignore[var-annotated]

    def on_train_batch_end(self, trainer: pl.Trainer, module: Any, outputs: Any, batch: Any, idx: int) -> None:
        if idx in (self.skip - 1, self.steps - 1) and torch.cuda.is_available() and module.device.type == "cuda":
            torch.cuda.synchronize()
        self.ends.append(time.perf_counter())
        TIMES.mark()


def data_module(episodes: int, steps: int) -> FixedBatches:
    dm = FixedBatches(dataset="glyphs", ways=5, shots=1, queries=15, episodes_per_batch=episodes, seed=0)
    dm.prepare_data()
    dm.setup("fit")
    loader = iter(EpisodicDataModule.train_dataloader(dm))
    drawn = [next(loader) for _ in range(min(steps, 16))]
    dm.batches = [drawn[i % len(drawn)] for i in range(steps)]
    return dm


def model(hidden: int, cuda_graphs: bool = False) -> ProtoNet:
    pl.seed_everything(0, verbose=False)  # the same initial weights in every contender
    net = ProtoNet(in_channels=1, image_size=28, backbone_options={"hidden": hidden}, cuda_graphs=cuda_graphs)
    net.episode_losses = TIMES.timed(net.episode_losses, "compute")  # type: ignore[method-assign]
    net.backward = TIMES.timed(net.backward, "compute")  # type: ignore[method-assign]
    return net


def bare_loop(dm: FixedBatches, hidden: int, device: str, skip: int, cuda_graphs: bool = False) -> list[float]:
    """End-to-end step times of a plain PyTorch loop over the same batches (the module's optimiser: Adam, fused on
    CUDA; with ``cuda_graphs``, the episode losses replayed as the module's CUDA graph)."""
    net = model(hidden).to(device).train()
    optimizer = default_optimizer(net.parameters())
    losses_of = GraphedLosses(net, net.episode_losses) if cuda_graphs else net.episode_losses
    ends = []
    for i, batch in enumerate(dm.batches):
        episode = dm.assemble(move_data_to_device(batch, device), augment=dm.augment, dtype=torch.float32)
        loss = losses_of(episode).losses.mean()
        optimizer.zero_grad(set_to_none=True)
        TIMES.timed(loss.backward, "compute")()
        optimizer.step()
        if device == "cuda" and i in (skip - 1, len(dm.batches) - 1):
            torch.cuda.synchronize()
        ends.append(time.perf_counter())
        TIMES.mark()
    return ends[skip - 1 :]


def trainer_loop(
    dm: FixedBatches,
    hidden: int,
    device: str,
    skip: int,
    log_every: int,
    folder: str,
    weighting: tuple | None,
    cuda_graphs: bool = False,
) -> list[float]:
    """End-to-end step times of ``trainer.fit`` over the same batches."""
    steps = len(dm.batches)
    clock = Clock(skip, steps)
    callbacks: list[pl.Callback] = [clock, NonFiniteGuard()]  # the guard every command-line run has
    if weighting is not None:
        target, proposal, normalization = weighting
        callbacks.insert(
            0,
            DifficultyWeightingCallback(
                target=target, proposal=proposal, normalization=normalization, warmup_steps=skip, window=200
            ),
        )
    trainer = pl.Trainer(
        max_steps=steps,
        limit_val_batches=0,
        logger=pl.loggers.CSVLogger(folder),
        log_every_n_steps=log_every,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator=device,
        devices=1,
        callbacks=callbacks,
    )
    trainer.fit(model(hidden, cuda_graphs), datamodule=dm)
    return clock.ends[skip - 1 :]


Round = list[tuple[float, tuple[float, float, float]]]  # each measured step's end and the Compute marks


def steps(rounds: list[Round]) -> tuple[list[float], list[float], list[tuple[float, float, float]]]:
    """Per-step wall times, host times (wall minus compute), and (compute, guard, weighting) seconds."""
    walls, hosts, parts = [], [], []
    for measured in rounds:
        for (a, ma), (b, mb) in zip(measured, measured[1:], strict=False):
            part = (mb[0] - ma[0], mb[1] - ma[1], mb[2] - ma[2])
            walls.append(b - a)
            hosts.append(b - a - part[0])
            parts.append(part)
    return walls, hosts, parts


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def run(contender: Callable[[str], list[float]], folder: str, skip: int) -> Round:
    TIMES.marks.clear()
    ends = contender(folder)
    return list(zip(ends, TIMES.marks[skip - 1 :], strict=True))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_round_arguments(parser, steps=111, skip=10)
    parser.add_argument("--hidden", type=int, default=2, help="conv4 channels (default 2: a near-free model)")
    parser.add_argument("--episodes", type=int, default=16, help="episodes per step (default 16)")
    parser.add_argument("--log-every-n-steps", type=int, default=50, help="the Trainer's (default 50, Lightning's)")
    parser.add_argument("--only", default=None, help="comma-separated proposals/normalizations to keep (e.g. normal)")
    parser.add_argument("--cuda-graphs", action="store_true", help="also each contender with cuda_graphs (CUDA)")
    parser.add_argument("--quick", action="store_true", help="1 round of 14 steps (checks that it runs)")
    args = parser.parse_args(argv)
    rounds, steps_per_fit, skip = round_settings(parser, args, quick=(1, 14, 3), min_skip=3)
    if args.cuda_graphs and args.device != "cuda":
        parser.error("--cuda-graphs needs --device cuda")
    set_threads(args.threads)
    print(f"Before: {machine()}")
    dm = data_module(args.episodes, steps_per_fit)
    weighted = [w for w in WEIGHTED if args.only is None or set(args.only.split(",")) & set(w[1:])]
    contenders: dict[str, Callable[[str], list[float]]] = {
        "bare loop": lambda _: bare_loop(dm, args.hidden, args.device, skip),
        "Trainer": lambda folder: trainer_loop(
            dm, args.hidden, args.device, skip, args.log_every_n_steps, folder, None
        ),
    }
    for w in weighted:
        contenders["Trainer + " + "/".join(w)] = functools.partial(
            trainer_loop, dm, args.hidden, args.device, skip, args.log_every_n_steps, weighting=w
        )
    if args.cuda_graphs:
        contenders["bare loop, cuda_graphs"] = lambda _: bare_loop(dm, args.hidden, args.device, skip, True)
        contenders["Trainer, cuda_graphs"] = lambda folder: trainer_loop(
            dm, args.hidden, args.device, skip, args.log_every_n_steps, folder, None, True
        )
        for w in weighted:
            contenders["Trainer + " + "/".join(w) + ", cuda_graphs"] = functools.partial(
                trainer_loop, dm, args.hidden, args.device, skip, args.log_every_n_steps, weighting=w, cuda_graphs=True
            )
    measured: dict[str, list[Round]] = {name: [] for name in contenders}
    with tempfile.TemporaryDirectory() as folder, timers():
        for _ in range(rounds):
            for name, contender in contenders.items():
                measured[name].append(run(contender, folder, skip))
    print(f"After:  {machine()}\n")
    _, bare_hosts, _ = steps(measured["bare loop"])
    rows = []
    for name in contenders:
        walls, hosts, parts = steps(measured[name])
        row = [name, f"{1e3 * median(walls):.1f}", f"{1e3 * median(hosts):.2f}"]
        row += [f"{1e3 * (median(hosts) - median(bare_hosts)):+.2f}", f"{1e3 * (mean(hosts) - mean(bare_hosts)):+.2f}"]
        row += [f"{1e3 * mean([p[1] for p in parts]):.2f}", f"{1e3 * mean([p[2] for p in parts]):.2f}"]
        row += [f"{args.episodes / mean(walls):,.0f}"]
        rows.append(row)
    header = [
        "contender", "step ms (median)", "host ms (median)", "overhead ms (median)", "overhead ms (mean)",
        "guard ms", "weighting ms", "episodes/s",
    ]  # fmt: skip
    print(
        f"ProtoNet conv4 hidden {args.hidden} on {args.device}, glyphs 5w1s15q x {args.episodes} episodes/step, "
        f"log_every_n_steps={args.log_every_n_steps}, {torch.get_num_threads()} thread(s); {rounds} round(s) of "
        f"{steps_per_fit} steps per contender, the first {skip} of each left out. host = a step's wall time minus its "
        "compute (episode_losses, backward, Adam's update); overhead = a contender's host time minus the bare loop's "
        "(median: a typical, non-logging step; mean: logging steps included). guard, weighting: mean ms/step in "
        "NonFiniteGuard and in the weighting callback's hooks (part of the overhead).\n"
    )
    print(table(header, rows))


if __name__ == "__main__":
    main()
