"""Step time of the task samplers (``data.task_sampler``) against plain sampling, in one run.

The shapes of the data-scarce study's cells (``configs/study/scarce_cpu.yaml``), on the embedded glyphs-100 at 5-way
5-shot, 32 px RGB: ProtoNet (cosine) on conv4 with 32 channels, 4 episodes of 5 queries per class a step, Adam lr 1e-3,
in one process, through the real ``Trainer`` (no validation, no checkpointing, CSV logger):

* ``plain``: no task sampler (the loader gathers the step's images ahead of the step);
* ``no_diversity_task``, ``hard_task_mining``, ``adaptive``, ``dynamic_dpp``: ``data.task_sampler`` (the classes
  chosen when the batch reaches the model, the images gathered then; the adaptive ones also learn from each step
  through ``TaskSamplerFeedback``); hard-task mining and the dynamic DPP without warm-up, so that every measured step
  serves mined or DPP tasks; the DPP's class features recomputed every 15 steps (Kumar et al.: every 500), so that
  the mean step time holds three refreshes;

The contenders take turns within each round (a busy moment slows them all alike); the table gives the median step
time and its ratio to plain sampling's, and the mean step time (which holds the DPP's refreshes).

    .venv/bin/python -m benchmarks.task_sampler_cost --threads 1       # 3 rounds of 45 steps, 5 left out
    .venv/bin/python -m benchmarks.task_sampler_cost --quick           # checks that it runs
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pytorch_lightning as pl
import torch

from benchmarks._timing import add_round_arguments, machine, median, round_settings, set_threads, table
from lightning_episodes import EpisodicDataModule, ProtoNet
from lightning_episodes.callbacks import TaskSamplerFeedback
from lightning_episodes.data import AdaptiveTaskSampler, DynamicDPP, HardTaskMining, NoDiversityTask, TaskSampler

#: contender -> a new task sampler (``None``: plain sampling)
CONTENDERS: dict[str, Callable[[], TaskSampler] | None] = {
    "plain": None,
    "no_diversity_task": NoDiversityTask,
    "hard_task_mining": lambda: HardTaskMining(warmup_steps=0),
    "adaptive": AdaptiveTaskSampler,
    "dynamic_dpp": lambda: DynamicDPP(warmup_steps=0, refresh_every=15),
}


class Clock(pl.Callback):
    """When each training step ends (synchronised with the device at the first and last measured one)."""

    def __init__(self, skip: int, steps: int) -> None:
        self.skip, self.steps, self.ends = skip, steps, []

    def on_train_batch_end(self, trainer: pl.Trainer, module: Any, outputs: Any, batch: Any, idx: int) -> None:
        if idx in (self.skip - 1, self.steps - 1) and module.device.type == "cuda":
            torch.cuda.synchronize()
        self.ends.append(time.perf_counter())


#: the study's data (glyphs-100, 60 images a class), and --quick's (the small embedded glyphs)
DATA: dict[bool, dict[str, Any]] = {
    False: {"dataset": "glyphs-100", "image_size": 32, "channels": 3, "train_images_per_class": 60},
    True: {"dataset": "glyphs", "image_size": 28, "channels": 1},
}


def fit(name: str, device: str, steps: int, skip: int, folder: str, quick: bool) -> list[float]:
    """One contender's fit; its measured step times (seconds)."""
    make = CONTENDERS[name]
    pl.seed_everything(0, verbose=False)  # the same initial weights and episodes in every contender
    options = DATA[quick]
    data = EpisodicDataModule(
        ways=5, shots=5, queries=5, episodes_per_batch=4, seed=0, task_sampler=None if make is None else make(),
        **options,
    )  # fmt: skip
    clock = Clock(skip, steps)
    callbacks: list[pl.Callback] = [clock, TaskSamplerFeedback()]
    trainer = pl.Trainer(
        max_steps=steps, limit_val_batches=0, logger=pl.loggers.CSVLogger(folder), log_every_n_steps=50,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, accelerator=device,
        devices=1, callbacks=callbacks,
    )  # fmt: skip
    model = ProtoNet(
        in_channels=options["channels"], image_size=options["image_size"], distance="cosine",
        backbone_options={"hidden": 32},
    )  # fmt: skip
    trainer.fit(model, datamodule=data)
    ends = clock.ends[skip - 1 :]
    return [b - a for a, b in zip(ends, ends[1:], strict=False)]


def main(argv: list[str] | None = None) -> list[list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_round_arguments(parser, steps=45, skip=5)
    parser.add_argument("--quick", action="store_true", help="1 round of 6 steps on tiny glyphs (checks that it runs)")
    args = parser.parse_args(argv)
    rounds, steps, skip = round_settings(parser, args, quick=(1, 6, 2), min_skip=2)
    dataset = DATA[args.quick]["dataset"]
    set_threads(args.threads)
    print(f"Before: {machine()}")
    walls: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(rounds):
            for name in CONTENDERS:
                walls[name] += fit(name, args.device, steps, skip, folder, args.quick)
    print(f"After:  {machine()}\n")
    reference = median(walls["plain"])
    rows = [
        [name, f"{1e3 * median(w):.1f}", f"{median(w) / reference:.2f}x", f"{1e3 * sum(w) / len(w):.1f}"]
        for name, w in walls.items()
    ]
    print(
        f"ProtoNet (cosine) conv4-32 on {args.device}, {dataset} 5w5s5q x 4 episodes/step, "
        f"{torch.get_num_threads()} thread(s); {rounds} round(s) of {steps} steps per contender, the first {skip} "
        "left out.\n"
    )
    print(table(["contender", "step ms (median)", "vs plain", "step ms (mean)"], rows))
    return rows


if __name__ == "__main__":
    main()
