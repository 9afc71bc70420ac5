"""Step time of difficulty *resampling* (``mode="resample"``, pool ``k`` = 2 and 4) against re-weighting.

The study's shapes (``configs/study/glyphs_cpu.yaml`` on ``configs/data/glyphs_hard_5w1s.yaml``): ProtoNet on
conv4 with 32 channels, glyphs-hard 5-way 1-shot, 4 episodes of 5 queries per class a step, Adam lr 1e-3, in one
process, through the real ``Trainer`` (no validation, no checkpointing, CSV logger, ``log_every_n_steps`` 50):

* ``plain``: no weighting callback;
* ``reweight``: ``DifficultyWeightingCallback(target="uniform")``, the paper's estimator;
* ``resample k=2`` / ``k=4``: ``mode="resample"``: each step also draws and assembles ``k x 4`` candidates, scores
  them in one forward pass without gradients, and assembles the 4 it chose.

Each contender's warm-up is the ``--skip`` steps left out, so every measured step re-weights or resamples. The
contenders take turns within each round (a busy moment slows them all alike); the table gives the median step time,
its ratio to re-weighting's, and for resampling the median of the scoring forward (``weighting/score_ms``: this
process's forward and the gather) and of drawing and assembling the candidates and the chosen (``draw_ms``), each
also as a fraction of the step.

    .venv/bin/python -m benchmarks.resample_cost --threads 1             # 3 rounds of 45 steps, 5 left out
    .venv/bin/python -m benchmarks.resample_cost --device cuda --steps 200 --skip 20
    .venv/bin/python -m benchmarks.resample_cost --quick                 # checks that it runs
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import pytorch_lightning as pl
import torch

from benchmarks._timing import add_round_arguments, machine, median, round_settings, set_threads, table
from lightning_episodes import EpisodicDataModule, ProtoNet
from lightning_episodes.callbacks import DifficultyWeightingCallback

#: contender -> the weighting callback's options (``None``: no callback)
CONTENDERS: dict[str, dict[str, Any] | None] = {
    "plain": None,
    "reweight": {},
    "resample k=2": {"mode": "resample", "pool": 2},
    "resample k=4": {"mode": "resample", "pool": 4},
}


class Clock(pl.Callback):
    """When each training step ends (synchronised with the device at the first and last measured one), and the
    resampling's own timings of the step."""

    def __init__(self, skip: int, steps: int, weighting: DifficultyWeightingCallback | None) -> None:
        self.skip, self.steps, self.weighting = skip, steps, weighting
        self.ends: list[float] = []
        self.parts: list[tuple[float, float]] = []

    def on_train_batch_end(self, trainer: pl.Trainer, module: Any, outputs: Any, batch: Any, idx: int) -> None:
        if idx in (self.skip - 1, self.steps - 1) and module.device.type == "cuda":
            torch.cuda.synchronize()
        self.ends.append(time.perf_counter())
        selection = None if self.weighting is None else self.weighting.last_selection
        self.parts.append((0.0, 0.0) if selection is None else (selection.score_seconds, selection.draw_seconds))


def fit(
    data: EpisodicDataModule, options: dict[str, Any] | None, device: str, steps: int, skip: int, folder: str
) -> Clock:
    pl.seed_everything(0, verbose=False)  # the same initial weights and episodes in every contender
    weighting = None if options is None else DifficultyWeightingCallback(target="uniform", warmup_steps=skip, **options)
    clock = Clock(skip, steps, weighting)
    trainer = pl.Trainer(
        max_steps=steps,
        limit_val_batches=0,
        logger=pl.loggers.CSVLogger(folder),
        log_every_n_steps=50,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator=device,
        devices=1,
        callbacks=[c for c in (weighting, clock) if c is not None],
    )
    model = ProtoNet(in_channels=1, image_size=28, backbone_options={"hidden": 32})
    trainer.fit(model, datamodule=data)
    return clock


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_round_arguments(parser, steps=45, skip=5)
    parser.add_argument("--quick", action="store_true", help="1 round of 8 steps (checks that it runs)")
    args = parser.parse_args(argv)
    rounds, steps, skip = round_settings(parser, args, quick=(1, 8, 3), min_skip=2)
    set_threads(args.threads)
    print(f"Before: {machine()}")
    data = EpisodicDataModule(dataset="glyphs-hard", ways=5, shots=1, queries=5, episodes_per_batch=4, seed=0)
    data.prepare_data()  # loaded once: every fit sets up the same data module again (its stream restarts at step 0)
    walls: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    parts: dict[str, list[tuple[float, float]]] = {name: [] for name in CONTENDERS}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(rounds):
            for name, options in CONTENDERS.items():
                clock = fit(data, options, args.device, steps, skip, folder)
                ends = clock.ends[skip - 1 :]
                walls[name] += [b - a for a, b in zip(ends, ends[1:], strict=False)]
                parts[name] += clock.parts[skip:]
    print(f"After:  {machine()}\n")
    reference = median(walls["reweight"])
    rows = []
    for name in CONTENDERS:
        step = median(walls[name])
        score, draw = median([p[0] for p in parts[name]]), median([p[1] for p in parts[name]])
        row = [name, f"{1e3 * step:.1f}", f"{step / reference:.2f}x"]
        shares = [f"{1e3 * part:.1f} ({part / step:.0%})" for part in (score, draw)]
        row += shares if score else ["–", "–"]
        rows.append(row)
    header = [
        "contender",
        "step ms (median)",
        "vs reweight",
        "scoring forward ms (share)",
        "draw + assemble ms (share)",
    ]
    print(
        f"ProtoNet conv4-32 on {args.device}, glyphs-hard 5w1s5q x 4 episodes/step, {torch.get_num_threads()} "
        f"thread(s); {rounds} round(s) of {steps} steps per contender, the first {skip} (the warm-up) left out.\n"
    )
    print(table(header, rows))


if __name__ == "__main__":
    main()
