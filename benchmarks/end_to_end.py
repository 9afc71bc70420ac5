"""End to end: training throughput of ``lightning-episodes fit`` and the share of each step spent on data.

ProtoNet conv4 (Euclidean), 5-way 5-shot with 15 queries per class, 16 episodes per step, on the embedded
``glyphs`` dataset (28x28 grey), through the real command line in this process: the shipped configs
``configs/data/glyphs_5w5s.yaml`` and ``configs/models/protonet_euclidean_conv4.yaml`` with Lightning's
``SimpleProfiler`` and a clock callback added, validation off (training throughput only), logs to a
temporary folder. After ``--warmup`` steps, it reports episodes per second over the remaining steps and
where each step's time went: fetching the batch from the loader (sampling + uint8 gather), turning it
into normalised float episodes (``on_after_batch_transfer``), and the rest (forward, backward, optimiser,
logging).

    .venv/bin/python -m benchmarks.end_to_end                 # 1 fit of 30 steps (5 of warm-up): ~5 min here
    .venv/bin/python -m benchmarks.end_to_end --runs 3 --threads 1
    .venv/bin/python -m benchmarks.end_to_end --quick         # 1 fit of 8 steps: checks that it runs

On this 2-core CPU a step (1,600 images of 28x28 through conv4, forward and backward) takes seconds: the
model, not the data, bounds training here.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

from benchmarks._clock import StepClock
from benchmarks._timing import machine, median, set_threads, table
from lightning_episodes.cli import main as cli_main

EPISODES_PER_STEP = 16
# SimpleProfiler's names for the two data phases of a training step
FETCH = "[_TrainingEpochLoop].train_dataloader_next"
ASSEMBLE = "[LightningDataModule]EpisodicDataModule.on_after_batch_transfer"


def run(steps: int, warmup: int, folder: str) -> dict[str, float]:
    """One ``fit`` through the CLI; per-step seconds (means over the steps after warm-up) and episodes/s."""
    profiler = {
        "class_path": "pytorch_lightning.profilers.SimpleProfiler",
        "init_args": {"dirpath": folder, "filename": "profile"},  # its report goes to a file, not stdout
    }
    sys.argv = sys.argv[:1]  # the CLI reads these arguments only (it warns about any on the real command line)
    cli = cli_main(
        [
            "fit",
            "--config=configs/data/glyphs_5w5s.yaml",
            "--config=configs/models/protonet_euclidean_conv4.yaml",
            f"--trainer.max_steps={steps}",
            "--trainer.limit_val_batches=0",
            "--trainer.enable_checkpointing=false",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            "--trainer.accelerator=cpu",
            "--trainer.devices=1",
            "--trainer.log_every_n_steps=20",
            f"--trainer.default_root_dir={folder}",
            f"--trainer.profiler={json.dumps(profiler)}",
            "--trainer.callbacks+=benchmarks._clock.StepClock",
        ]
    )
    trainer = cli.trainer
    clock = next(cb for cb in trainer.callbacks if isinstance(cb, StepClock))  # type: ignore[attr-defined]
    durations = trainer.profiler.recorded_durations  # type: ignore[attr-defined]
    measured = len(clock.ends) - warmup - 1
    if measured < 2:
        raise ValueError(f"--steps must exceed --warmup + 2, got {steps} steps and {warmup} of warm-up")
    step = (clock.ends[-1] - clock.ends[warmup]) / measured  # end to end: everything between two step ends
    # the loader is asked for batch n + 1 during step n (Lightning prefetches one batch): same count, same mean
    fetch = sum(durations[FETCH][warmup + 1 :]) / len(durations[FETCH][warmup + 1 :])
    assemble = sum(durations[ASSEMBLE][warmup + 1 :]) / len(durations[ASSEMBLE][warmup + 1 :])
    compute = sum(e - s for s, e in zip(clock.starts[warmup + 1 :], clock.ends[warmup + 1 :], strict=True)) / measured
    return {
        "episodes/s": EPISODES_PER_STEP / step,
        "step": step,
        "fetch": fetch,
        "assemble": assemble,
        "compute": compute,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 fit of 8 steps (a smoke run)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--runs", type=int, default=None, help="fits to run (default 1); medians over them")
    parser.add_argument("--steps", type=int, default=None, help="training steps per fit (default 30)")
    parser.add_argument("--warmup", type=int, default=None, help="steps left out of the means (default 5)")
    args = parser.parse_args(argv)
    runs = args.runs or 1
    steps = args.steps or (8 if args.quick else 30)
    warmup = args.warmup if args.warmup is not None else (2 if args.quick else 5)
    set_threads(args.threads)
    print(f"Before: {machine()}")
    results = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            results.append(run(steps, warmup, folder))
    print(f"After:  {machine()}\n")
    print(report(results, steps, warmup))


def report(results: list[dict[str, float]], steps: int, warmup: int) -> str:
    def mid(key: str) -> float:
        return median([r[key] for r in results])

    step = mid("step")
    rows = [
        ["training throughput", f"{mid('episodes/s'):,.1f} episodes/s", ""],
        ["step, end to end", f"{1e3 * step:,.1f} ms", "100%"],
        ["  fetch: sampling + uint8 gather (loader)", f"{1e3 * mid('fetch'):,.1f} ms", f"{mid('fetch') / step:.1%}"],
        [
            "  assemble: normalise to float (on_after_batch_transfer)",
            f"{1e3 * mid('assemble'):,.1f} ms",
            f"{mid('assemble') / step:.1%}",
        ],
        [
            "  compute: forward, backward, optimiser, hooks",
            f"{1e3 * mid('compute'):,.1f} ms",
            f"{mid('compute') / step:.1%}",
        ],
    ]
    waiting = (mid("fetch") + mid("assemble")) / step
    header = [f"ProtoNet conv4, glyphs 5w5s15q, {EPISODES_PER_STEP} episodes/step", "median", "share of step"]
    return (
        f"{len(results)} fit(s) of {steps} steps, the first {warmup} left out; medians over fits.\n\n"
        + table(header, rows)
        + f"\n\nShare of step time spent waiting for data (fetch + assemble): {waiting:.1%}"
    )


if __name__ == "__main__":
    main()
