"""What this library reads of Lightning's private state, in one place (the ground floor: it imports nothing of the
package), so that a Lightning upgrade that moves it breaks one file."""

from __future__ import annotations

import pytorch_lightning as pl

__all__ = ["logger_writes"]


def logger_writes(trainer: pl.Trainer) -> bool:
    """Whether the loggers write this training step's metrics: Lightning's own condition (``log_every_n_steps``,
    every step under ``fast_dev_run``), which its ``LearningRateMonitor`` also reads; the same on every rank.

    Per-step values logged only then are the values the loggers receive, without the cost of ``self.log`` (and of
    reading them from the device) on the steps in between."""
    connector = getattr(trainer, "_logger_connector", None)
    return connector is None or bool(connector.should_update_logs or getattr(trainer, "fast_dev_run", False))
