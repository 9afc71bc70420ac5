"""The weighting options side by side on glyphs: accuracy, step-scale spread, Pareto k and gradient concentration.

Every arm trains ProtoNet conv4 (32 channels) on glyphs 5-way 1-shot with the settings of
``configs/study/glyphs_cpu.yaml`` (5 training queries per class, 4 episodes per step, Adam lr 1e-3) for
``--steps`` steps (warm-up 100), then is validated on 300 fixed episodes and tested on 1,000 fixed test episodes
(15 queries per class; the last model, no checkpoint selection). The arms differ only in the options of
``DifficultyWeightingCallback`` (see ``ARMS``); everything else, seeds included, is identical. Per run it records
``result.json``: accuracies, the per-step ``sum w / ESS`` (the ESS loss's step scale), ``pareto_k`` of the recent
weights, and the total gradient norm of every step (before the optimizer step). Finished runs are skipped, so the
script resumes where it stopped::

    OMP_NUM_THREADS=1 python scripts/weighting_study.py --out runs/weighting_study --seeds 0 1

``--table`` prints the summary table (markdown) of the finished runs only.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

from lightning_episodes import EpisodicDataModule, ProtoNet
from lightning_episodes.callbacks import DifficultyWeightingCallback

WARMUP = 100

#: arm name -> DifficultyWeightingCallback options (on top of warmup_steps, log_grad_norm, seed)
ARMS: dict[str, dict[str, Any]] = {
    "baseline": {"target": "baseline"},
    "uniform": {"target": "uniform"},
    "uniform+placebo": {"target": "uniform", "shuffle_weights": True},
    "uniform self": {"target": "uniform", "normalization": "self"},
    "uniform truncated": {"target": "uniform", "normalization": "truncated"},
    "uniform psis": {"target": "uniform", "normalization": "psis"},
    "uniform running": {"target": "uniform", "normalization": "running"},
    "uniform lognormal": {"target": "uniform", "proposal": "lognormal"},
    "uniform empirical": {"target": "uniform", "proposal": "empirical"},
    "uniform lognormal+running": {"target": "uniform", "proposal": "lognormal", "normalization": "running"},
    "uniform lognormal+psis": {"target": "uniform", "proposal": "lognormal", "normalization": "psis"},
}


class StepRecorder(Callback):
    """Reads what the weighting callback logged at every step (the loggers write every step here)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        metrics = trainer.callback_metrics
        keys = ("sum_w_over_ess", "pareto_k", "grad_norm", "skewness", "normality_p")
        self.rows.append({k: float(metrics.get(f"weighting/{k}", math.nan)) for k in keys})


def _folder(out: Path, arm: str, seed: int) -> Path:
    return out / arm.replace(" ", "_").replace("+", "-") / f"seed{seed}"


def run(out: Path, arm: str, seed: int, steps: int) -> dict[str, Any]:
    """Trains and evaluates one arm with one seed; returns (and writes) its record."""
    folder = _folder(out, arm, seed)
    pl.seed_everything(seed)
    data = EpisodicDataModule(
        dataset="glyphs", ways=5, shots=1, queries=5, eval_queries=15, episodes_per_batch=4,
        eval_episodes_per_batch=50, val_episodes=300, test_episodes=1000, seed=0, train_seed=seed,
    )  # fmt: skip
    model = ProtoNet(backbone="conv4", backbone_options={"hidden": 32}, image_size=28)
    weighting = DifficultyWeightingCallback(warmup_steps=WARMUP, log_grad_norm=True, seed=seed, **ARMS[arm])
    recorder = StepRecorder()
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_steps=steps, val_check_interval=steps, check_val_every_n_epoch=None,
        log_every_n_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, callbacks=[weighting, recorder],
    )  # fmt: skip
    start = time.perf_counter()
    trainer.fit(model, data)
    val = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    test = trainer.test(model, data, verbose=False)[0]
    record = {
        "arm": arm, "seed": seed, "steps": steps, "options": dict(weighting.options),
        "seconds": time.perf_counter() - start,
        "val_acc": val.get("val/acc"), "test_acc": test["test/acc"], "test_ci95": test["test/acc_ci95"],
        "rows": recorder.rows,
    }  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text(json.dumps(record))
    return record


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else math.nan


def summarise(record: dict[str, Any]) -> dict[str, float]:
    """Step-scale spread, median k-hat and gradient concentration over the steps after the warm-up."""
    rows = record["rows"][WARMUP:]
    scale = [r["sum_w_over_ess"] for r in rows if math.isfinite(r["sum_w_over_ess"]) and r["sum_w_over_ess"] > 0]
    khat = [r["pareto_k"] for r in rows if math.isfinite(r["pareto_k"])]
    squares = sorted((r["grad_norm"] ** 2 for r in rows if math.isfinite(r["grad_norm"])), reverse=True)
    top = max(1, round(0.05 * len(squares)))
    return {
        "scale_min": min(scale, default=math.nan),
        "scale_p05": _quantile(scale, 0.05),
        "scale_median": statistics.median(scale) if scale else math.nan,
        "scale_p95": _quantile(scale, 0.95),
        "scale_max": max(scale, default=math.nan),
        "khat_median": statistics.median(khat) if khat else math.nan,
        "grad_top5": sum(squares[:top]) / sum(squares) if squares else math.nan,
    }


def table(out: Path, seeds: list[int]) -> str:
    """The markdown table of the finished runs: one row per arm, seeds side by side."""
    lines = [
        "| arm | val acc % (per seed) | test acc % (per seed) | Σw/ESS min / 5% / median / 95% / max | median k̂ "
        "| top-5% steps' share of Σ‖g‖² |",
        "|---|---|---|---|---|---|",
    ]
    for arm in ARMS:
        records = [
            json.loads(path.read_text())
            for seed in seeds
            if (path := _folder(out, arm, seed) / "result.json").is_file()
        ]
        if not records:
            continue
        parts = [summarise(r) for r in records]
        val = " / ".join(f"{100 * r['val_acc']:.1f}" for r in records)
        test = " / ".join(f"{100 * r['test_acc']:.1f}" for r in records)
        scale = " ; ".join(
            " / ".join(f"{p[k]:.2f}" for k in ("scale_min", "scale_p05", "scale_median", "scale_p95", "scale_max"))
            for p in parts
        )
        khat = " / ".join("–" if math.isnan(p["khat_median"]) else f"{p['khat_median']:.2f}" for p in parts)
        top = " / ".join(f"{100 * p['grad_top5']:.0f}%" for p in parts)
        lines.append(f"| {arm} | {val} | {test} | {scale} | {khat} | {top} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/weighting_study"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--table", action="store_true", help="only print the table of the finished runs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if not args.table:
        for seed in args.seeds:  # seed by seed: a first seed of every arm before a second
            for arm in args.arms:
                if (_folder(args.out, arm, seed) / "result.json").is_file():
                    continue
                record = run(args.out, arm, seed, args.steps)
                accuracy, seconds = 100 * record["test_acc"], record["seconds"]
                print(f"{arm} seed {seed}: test {accuracy:.2f}% ({seconds:.0f} s)", flush=True)
    print(table(args.out, args.seeds))


if __name__ == "__main__":
    main()
