"""What this library reads of Lightning's private state, in one place (the ground floor: it imports nothing of the
package), so that a Lightning upgrade that moves it breaks one file."""

from __future__ import annotations

import copy
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.core.mixins.hparams_mixin import _given_hyperparameters

__all__ = ["given_hyperparameters", "logger_writes", "record_hyperparameter"]


def logger_writes(trainer: pl.Trainer) -> bool:
    """Whether the loggers write this training step's metrics: Lightning's own condition (``log_every_n_steps``,
    every step under ``fast_dev_run``), which its ``LearningRateMonitor`` also reads; the same on every rank.

    Per-step values logged only then are the values the loggers receive, without the cost of ``self.log`` (and of
    reading them from the device) on the steps in between."""
    connector = getattr(trainer, "_logger_connector", None)
    return connector is None or bool(connector.should_update_logs or getattr(trainer, "fast_dev_run", False))


def given_hyperparameters() -> dict[str, Any]:
    """The hyper-parameters LightningCLI gives the module it is instantiating (its configuration, class paths and
    ``init_args`` as plain values); empty outside it."""
    return _given_hyperparameters.get() or {}


def record_hyperparameter(module: pl.LightningModule, name: str, value: Any) -> None:
    """Set the saved hyper-parameter ``name`` after ``save_hyperparameters``: in ``hparams`` (what checkpoints save)
    and ``hparams_initial`` (what loggers write)."""
    module.hparams[name] = value
    vars(module)["_hparams_initial"][name] = copy.deepcopy(value)
