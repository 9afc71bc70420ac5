"""Weighting overhead: ProtoNet conv4 training steps with ``DifficultyWeightingCallback`` against without.

ProtoNet conv4 (Euclidean), 5-way 5-shot with 15 queries per class, 16 episodes per step, on the embedded
``glyphs`` dataset, through the real ``Trainer``; every arm starts from the same initial weights and the
same data seed, so all arms see the same episodes. The arms take turns within each round (a busy moment
slows all of them alike):

* ``plain``: no callback (every weight 1);
* ``uniform, online``: ``DifficultyWeightingCallback(target="uniform", proposal="online")`` with a short
  warm-up (``warmup_steps=2``), so the measured steps run the weighted path;
* ``uniform, offline`` (``--offline``): the same with ``proposal="offline"`` and a reference checkpoint
  (an untrained ProtoNet: its cost, not its quality, matters here). Offline mode adds a forward pass of
  the reference per step by design; its scoring of ``offline_episodes`` before training is not counted.

Two measures of the overhead: the step-time ratio (medians over the measured steps of every round, end to
end between step ends, data included) and the callback's own time (measured inside its hooks and its
``episode_weights``), divided by the plain step time; the second is immune to the machine's noise.

    .venv/bin/python -m benchmarks.weighting_overhead                  # 2 rounds of 8 steps (3 of warm-up): ~5 min
    .venv/bin/python -m benchmarks.weighting_overhead --offline
    .venv/bin/python -m benchmarks.weighting_overhead --log-every-n-steps 50   # Lightning's default logging
    .venv/bin/python -m benchmarks.weighting_overhead --quick          # 1 round of 5 steps: checks that it runs
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from torch import Tensor

from benchmarks._clock import StepClock
from benchmarks._timing import machine, median, set_threads, table
from lightning_episodes import EpisodicDataModule, ProtoNet
from lightning_episodes.callbacks import DifficultyWeightingCallback
from lightning_episodes.data.episode import Episode
from lightning_episodes.weighting import EpisodeWeights


class TimedWeighting(DifficultyWeightingCallback):
    """The callback, with the time spent in its per-step work added up (weights, then the update)."""

    seconds: float = 0.0

    def episode_weights(self, module: Any, batch: Episode, difficulties: Tensor) -> EpisodeWeights:
        start = time.perf_counter()
        try:
            return super().episode_weights(module, batch, difficulties)
        finally:
            self.seconds += time.perf_counter() - start

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, idx: int) -> None:
        start = time.perf_counter()
        try:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, idx)
        finally:
            self.seconds += time.perf_counter() - start


def data(episodes: int) -> EpisodicDataModule:
    return EpisodicDataModule(dataset="glyphs", ways=5, shots=5, queries=15, episodes_per_batch=episodes, seed=0)


def trainer(steps: int, folder: str, callbacks: list[pl.Callback], log_every_n_steps: int = 1) -> pl.Trainer:
    return pl.Trainer(
        max_steps=steps,
        limit_val_batches=0,
        logger=pl.loggers.CSVLogger(folder),  # logging is part of a real step (the callback logs 10 values)
        log_every_n_steps=log_every_n_steps,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
        callbacks=callbacks,
    )


def reference_checkpoint(folder: str, episodes: int) -> str:
    """A ProtoNet checkpoint after one plain step: the offline arm's reference."""
    pl.seed_everything(1, verbose=False)
    fit = trainer(1, folder, [])
    fit.fit(ProtoNet(in_channels=1, image_size=28), datamodule=data(episodes))
    path = str(Path(folder) / "reference.ckpt")
    fit.save_checkpoint(path)
    return path


def run_arm(
    callback: TimedWeighting | None, steps: int, warmup: int, episodes: int, folder: str, log_every_n_steps: int = 1
) -> tuple[list[float], float]:
    """Step times after warm-up (end to end) and the callback's own seconds per measured step."""
    pl.seed_everything(0, verbose=False)  # the same initial weights in every arm
    clock = StepClock()
    fit = trainer(steps, folder, [clock] if callback is None else [callback, clock], log_every_n_steps)
    seconds_at_warmup = 0.0

    class Mark(pl.Callback):  # the callback's seconds when the measured steps begin
        def on_train_batch_start(self, trainer: pl.Trainer, module: Any, batch: Any, idx: int) -> None:
            nonlocal seconds_at_warmup
            if idx == warmup + 1 and callback is not None:
                seconds_at_warmup = callback.seconds

    fit.callbacks.append(Mark())  # type: ignore[attr-defined]
    fit.fit(ProtoNet(in_channels=1, image_size=28), datamodule=data(episodes))
    ends = clock.ends[warmup:]
    step_times = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    own = 0.0 if callback is None else (callback.seconds - seconds_at_warmup) / len(step_times)
    return step_times, own


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round of 5 steps (a smoke run)")
    parser.add_argument("--offline", action="store_true", help="also measure the offline proposal")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of all arms (default 2)")
    parser.add_argument("--steps", type=int, default=None, help="steps per fit (default 8)")
    parser.add_argument("--warmup", type=int, default=None, help="steps left out of each fit (default 3)")
    parser.add_argument("--episodes", type=int, default=16, help="episodes per step (default 16)")
    parser.add_argument(
        "--log-every-n-steps", type=int, default=1, help="the Trainer's (default 1: every step logs, the most cost)"
    )
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 2)
    steps = args.steps or (5 if args.quick else 8)
    warmup = args.warmup if args.warmup is not None else (2 if args.quick else 3)
    if steps - warmup < 2:
        parser.error(f"--steps must exceed --warmup by at least 2, got {steps} and {warmup}")
    set_threads(args.threads)
    print(f"Before: {machine()}")
    times: dict[str, list[float]] = {}
    own: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        reference = reference_checkpoint(folder, args.episodes) if args.offline else None
        arms: dict[str, Any] = {
            "plain (no callback)": lambda: None,
            "uniform, online": lambda: TimedWeighting(target="uniform", proposal="online", warmup_steps=2),
        }
        if reference is not None:
            arms["uniform, offline"] = lambda: TimedWeighting(
                target="uniform", proposal="offline", reference_checkpoint=reference, offline_episodes=32
            )
        for _ in range(rounds):
            for name, make in arms.items():
                arm = run_arm(make(), steps, warmup, args.episodes, folder, args.log_every_n_steps)
                step_times, callback_seconds = arm
                times.setdefault(name, []).extend(step_times)
                own.setdefault(name, []).append(callback_seconds)
    print(f"After:  {machine()}\n")
    print(report(times, own, rounds, steps, warmup, args.episodes))


def report(
    times: dict[str, list[float]], own: dict[str, list[float]], rounds: int, steps: int, warmup: int, episodes: int
) -> str:
    plain = median(times["plain (no callback)"])
    rows = []
    for name, values in times.items():
        step = median(values)
        callback = median(own[name])
        rows.append(
            [
                name,
                f"{1e3 * step:,.1f}",
                f"{1e3 * min(values):,.1f}–{1e3 * max(values):,.1f}",
                f"{step / plain - 1:+.1%}",
                f"{1e3 * callback:,.2f}",
                f"{callback / plain:.2%}",
            ]
        )
    header = ["arm", "step ms (median)", "range", "step-time overhead", "callback ms/step", "callback / plain step"]
    online = median(own["uniform, online"]) / plain
    return (
        f"ProtoNet conv4, glyphs 5w5s15q, {episodes} episodes/step; {rounds} round(s) of {steps} steps per arm, "
        f"the first {warmup} of each fit left out.\n\n"
        + table(header, rows)
        + f"\n\nGoal <= 3% (online): the callback's own time is {online:.2%} of a plain step "
        f"({'met' if online <= 0.03 else 'missed'})."
    )


if __name__ == "__main__":
    main()
