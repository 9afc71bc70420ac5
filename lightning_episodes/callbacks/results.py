"""The writer of a test's record (:mod:`lightning_episodes.evaluation.record`): ``test_results.json``, the
machine-readable record of a test run, and ``test_episodes.csv``, its per-episode scores, both written beside the logs.

``lightning-episodes report`` reads the record, ``compare`` both. The command line adds a :class:`TestResultsWriter`
to every Trainer without one (:func:`~lightning_episodes.callbacks.default_callbacks`).
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback
from typing_extensions import override

from lightning_episodes.algorithms.loading import read_checkpoint
from lightning_episodes.callbacks.difficulty_weighting import DifficultyWeightingCallback
from lightning_episodes.evaluation.record import (
    RESULTS_FILE,
    SCORES_FILE,
    checkpoint_step,
    environment,
    plain,
    results_record,
    scores_table,
)


def _weighting_callback(trainer: pl.Trainer) -> DifficultyWeightingCallback | None:
    return next((cb for cb in trainer.callbacks if isinstance(cb, DifficultyWeightingCallback)), None)  # type: ignore[attr-defined]


def sampling_record(trainer: pl.Trainer) -> dict[str, Any] | None:
    """Every option of the Trainer's :class:`DifficultyWeightingCallback` (``None`` without one): the arms of a
    comparison differ in them (``target`` and ``proposal`` among them, as older records had)."""
    callback = _weighting_callback(trainer)
    return None if callback is None else dict(callback.options)


def weighted_steps(trainer: pl.Trainer) -> int | None:
    """The training steps whose weights came from the weighting callback's ``q`` (not its warm-up's 1s) in the fit
    of the tested weights: from the tested checkpoint's record of the callback, else from the callback itself;
    ``None`` without a callback, or where its checkpoint predates the count."""
    callback = _weighting_callback(trainer)
    if callback is None:
        return None
    if not trainer.ckpt_path:
        return callback.state.weighted_steps
    state = (read_checkpoint(trainer.ckpt_path).get("callbacks") or {}).get(callback.state_key)
    counted = state.get("weighted_steps") if isinstance(state, dict) else None
    return None if counted is None else int(counted)


def sampling_defaults(trainer: pl.Trainer) -> dict[str, Any] | None:
    """The defaults of the options of the Trainer's :class:`DifficultyWeightingCallback` (a subclass's own defaults
    over the base class's; ``None`` without one), as JSON scalars (a default that is an object is left out: an option
    with no such default is named in a report)."""
    callback = _weighting_callback(trainer)
    if callback is None:
        return None
    defaults: dict[str, Any] = {}
    for cls in (DifficultyWeightingCallback, type(callback)):
        for name, parameter in inspect.signature(cls.__init__).parameters.items():
            if parameter.default is not inspect.Parameter.empty:
                defaults[name] = str(parameter.default) if isinstance(parameter.default, Path) else parameter.default
    return plain({name: value for name, value in defaults.items() if name in callback.options})


class TestResultsWriter(Callback):
    """Writes ``<log dir>/test_results.json`` at the end of each test of an
    :class:`~lightning_episodes.EpisodicModule`: accuracy ± 95% CI, loss and number of test episodes, the
    checkpoint, the global step, the seed, the sampling scheme (every option of the weighting callback), the model
    and data settings and a hash of them (the scenario), and the fit's validation curve (``validation``: every
    ``[step, val/acc]`` of the fit that led to the tested model, kept in the checkpoints so a resumed fit or a test
    of a saved checkpoint still has it); and beside it ``test_episodes.csv``: each test episode's
    identity, difficulty and accuracy as the test computed them (what ``lightning-episodes compare`` pairs), when
    the test ran on an :class:`~lightning_episodes.EpisodicDataModule`'s fixed test episodes (else a table left by
    an earlier test in that folder is removed).

    Under DDP, every rank takes part in finding the log folder (Lightning broadcasts it) and rank 0 writes. Nothing
    is written without a logger.
    """

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self) -> None:
        #: ``{step: val/acc}`` of every validation of the fit (the sanity check left out)
        self.validation: dict[int, float] = {}

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        accuracy = trainer.callback_metrics.get("val/acc")
        if trainer.state.fn == "fit" and not trainer.sanity_checking and accuracy is not None:
            self.validation[trainer.global_step] = float(accuracy)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"validation": [[step, accuracy] for step, accuracy in sorted(self.validation.items())]}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # a union: testing the best checkpoint after a fit restores the curve up to the best step, which must not
        # cut off the later validations this writer saw
        self.validation.update({int(step): float(accuracy) for step, accuracy in state_dict.get("validation", [])})

    @override
    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        results = getattr(pl_module, "test_results", None)
        if trainer.logger is None or not results:
            return
        log_dir = trainer.log_dir  # a collective under DDP: called on every rank
        if log_dir is None or not trainer.is_global_zero:
            return
        path = Path(log_dir) / RESULTS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.record(trainer, pl_module, results), indent=2, sort_keys=True))
        table = scores_table(getattr(trainer, "datamodule", None), getattr(pl_module, "test_episode_scores", None))
        if table is None:
            path.with_name(SCORES_FILE).unlink(missing_ok=True)  # an earlier test's, not this one's
        else:
            table.write(path.with_name(SCORES_FILE))

    @staticmethod
    def record(trainer: pl.Trainer, pl_module: pl.LightningModule, results: dict[str, float]) -> dict[str, Any]:
        """The record of one test (:func:`~lightning_episodes.evaluation.results_record`): ``results`` are the module's
        logged ``test/*`` values."""
        datamodule = getattr(trainer, "datamodule", None)
        seed = os.environ.get("PL_GLOBAL_SEED")
        return results_record(
            results,
            type(pl_module).__name__,
            dict(pl_module.hparams),
            dict(datamodule.hparams) if datamodule is not None and hasattr(datamodule, "hparams") else {},
            eval_batch_norm=getattr(pl_module, "eval_batch_norm", None),
            global_step=trainer.global_step or checkpoint_step(trainer.ckpt_path),
            ckpt_path=trainer.ckpt_path,
            seed=None if seed is None else int(seed),
            sampling=sampling_record(trainer),
            sampling_defaults=sampling_defaults(trainer),
            weighted_steps=weighted_steps(trainer),
            made_with=environment(trainer.strategy.root_device, trainer.precision),
            trained_on=getattr(pl_module, "trained_on", None),
            validation=validation_record(TestResultsWriter._writer_of(trainer)),
        )

    @staticmethod
    def _writer_of(trainer: pl.Trainer) -> TestResultsWriter | None:
        return next((cb for cb in trainer.callbacks if isinstance(cb, TestResultsWriter)), None)  # type: ignore[attr-defined]


def validation_record(writer: TestResultsWriter | None) -> list[list[float]]:
    """The ``validation`` entry of a record: ``[step, val/acc]`` pairs in step order (empty without a writer)."""
    return [] if writer is None else [[step, accuracy] for step, accuracy in sorted(writer.validation.items())]
