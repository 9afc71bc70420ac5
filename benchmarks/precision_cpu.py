"""bfloat16 and ``channels_last`` on a CPU for every algorithm: training steps and the evaluation forward.

ProtoNet (Euclidean), MAML and ANIL (first order off: as shipped, 5 inner steps for MAML and ANIL at 0.01, here 2 to
keep the run short) and FEAT (its transformer head on conv4), all on conv4 with 32 channels, 5-way 5-shot with 15
queries per class, 4 episodes a step, on the embedded ``glyphs`` dataset (28×28 grey) through the real ``pl.Trainer``
in this process, in four settings: ``32-true``, ``32-true`` + ``channels_last``, ``bf16-mixed`` and ``bf16-mixed`` +
``channels_last``. For each algorithm and setting: the median training step (after ``--skip`` steps) and the
evaluation forward of 100 validation episodes (one ``validate``; a data-scarce run spends about a quarter of its time
there), both in milliseconds, with the speed-up over ``32-true``. The settings take turns within each round.

The processor's name and its bfloat16 instruction sets (``avx512_bf16``, ``amx_bf16``: without either, bfloat16
arithmetic is emulated and slower than float32) are printed first.

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.precision_cpu --threads 1
    .venv/bin/python -m benchmarks.precision_cpu --quick      # checks that it runs
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytorch_lightning as pl

from benchmarks._timing import add_round_arguments, machine, median, round_settings, set_threads, table
from lightning_episodes import ANIL, FEAT, MAML, EpisodicDataModule, EpisodicModule, ProtoNet

SHAPE: dict[str, Any] = {"in_channels": 1, "image_size": 28, "backbone_options": {"hidden": 32}}
ALGORITHMS: dict[str, Callable[[bool], EpisodicModule]] = {
    "ProtoNet": lambda cl: ProtoNet(**SHAPE, channels_last=cl),
    "MAML": lambda cl: MAML(**SHAPE, ways=5, adaptation_steps=2, channels_last=cl),
    "ANIL": lambda cl: ANIL(**SHAPE, ways=5, adaptation_steps=2, channels_last=cl),
    "FEAT": lambda cl: FEAT(backbone="conv4", **SHAPE, channels_last=cl),
}
#: setting -> (Trainer precision, channels_last)
SETTINGS: dict[str, tuple[str, bool]] = {
    "32-true": ("32-true", False),
    "32-true + channels_last": ("32-true", True),
    "bf16-mixed": ("bf16-mixed", False),
    "bf16-mixed + channels_last": ("bf16-mixed", True),
}
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                present = set(line.split(":", 1)[1].split())
                return ", ".join(f"{flag} {'yes' if flag in present else 'no'}" for flag in FLAGS)
    except OSError:
        pass
    return "flags unknown"


class Ends(pl.Callback):
    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_train_batch_end(self, trainer: pl.Trainer, module: Any, outputs: Any, batch: Any, idx: int) -> None:
        self.ends.append(time.perf_counter())


def measure(
    algorithm: str, precision: str, channels_last: bool, steps: int, skip: int, val: int
) -> tuple[float, float]:
    """``(ms per training step, ms per validation of `val` episodes)``."""
    pl.seed_everything(0, verbose=False)
    data = EpisodicDataModule(dataset="glyphs", ways=5, shots=5, queries=15, episodes_per_batch=4,
                              val_episodes=val, eval_episodes_per_batch=10, test_episodes=10)  # fmt: skip
    ends = Ends()
    trainer = pl.Trainer(max_steps=steps, limit_val_batches=0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
                         precision=precision, callbacks=[ends])  # fmt: skip
    model = ALGORITHMS[algorithm](channels_last)
    trainer.fit(model, datamodule=data)
    step = (ends.ends[-1] - ends.ends[skip]) / (len(ends.ends) - 1 - skip)
    validator = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                           devices=1, precision=precision)  # fmt: skip
    validator.validate(model, datamodule=data, verbose=False)  # warm-up (the loader's first batches)
    start = time.perf_counter()
    validator.validate(model, datamodule=data, verbose=False)
    return 1000 * step, 1000 * (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_round_arguments(parser, steps=20, skip=4)
    parser.add_argument("--quick", action="store_true", help="1 round of 5 steps, 10 validation episodes")
    parser.add_argument("--only", nargs="+", choices=sorted(ALGORITHMS), help="these algorithms only")
    args = parser.parse_args(argv)
    rounds, steps, skip = round_settings(parser, args, quick=(1, 5, 2), min_skip=1)
    val = 10 if args.quick else 100
    threads = set_threads(args.threads)
    print(f"before: {machine()}\nbfloat16 support: {cpu_flags()}")
    rows = []
    for algorithm in args.only or ALGORITHMS:
        found: dict[str, list[tuple[float, float]]] = {name: [] for name in SETTINGS}
        for _ in range(rounds):
            for name, (precision, channels_last) in SETTINGS.items():
                found[name].append(measure(algorithm, precision, channels_last, steps, skip, val))
        base_step, base_eval = (median([v[i] for v in found["32-true"]]) for i in (0, 1))
        for name, values in found.items():
            step, evaluation = median([v[0] for v in values]), median([v[1] for v in values])
            rows.append([algorithm, name, f"{step:.0f}", f"{base_step / step:.2f}x", f"{evaluation:.0f}",
                         f"{base_eval / evaluation:.2f}x"])  # fmt: skip
    print(f"after: {machine()} ({threads} thread(s)); {rounds} round(s) of {steps} steps, {skip} left out\n")
    header = ["algorithm", "setting", "training step (ms)", "vs 32-true", f"validation of {val} episodes (ms)",
              "vs 32-true"]  # fmt: skip
    print(table(header, rows))


if __name__ == "__main__":
    main()
