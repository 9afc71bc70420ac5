"""Checkpoints to resume from: ``last.ckpt`` that is always the last state, and where a run's ``last.ckpt`` is.

Lightning's ``ModelCheckpoint(monitor=..., save_last=True)`` rewrites ``last.ckpt`` only when it writes another
checkpoint, i.e. when the monitored metric improves: after a run whose validation peaked early, ``last.ckpt`` is
that early state and the final weights are written nowhere. :class:`ResumableCheckpoint` keeps the best-by-monitor
checkpoints as they are and also writes ``last.ckpt`` every ``last_every_n_steps`` steps and at the end of ``fit``.
:func:`last_checkpoints` finds the ``last.ckpt`` files a Trainer's configuration writes, so that
``fit --ckpt_path last`` resumes the run, in a new process, whatever folder the run was given.
"""

from __future__ import annotations

import csv
import warnings
from pathlib import Path
from typing import Any
from weakref import proxy

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities.exceptions import SIGTERMException
from typing_extensions import override

from lightning_episodes.run_folder import LOCK_NAME, atomic_write


def _fast_dev_run(trainer: pl.Trainer) -> bool:
    # ModelCheckpoint never saves in a fast_dev_run (an attribute the Trainer sets in its constructor)
    return bool(getattr(trainer, "fast_dev_run", False))


class ResumableCheckpoint(ModelCheckpoint):
    """A ``ModelCheckpoint`` whose ``last.ckpt`` is the latest training state.

    The top-k checkpoints by ``monitor`` are written as by ``ModelCheckpoint`` (e.g. the best by ``val/acc`` at
    each validation). ``last.ckpt`` is written as well:

    - every ``last_every_n_steps`` training (optimiser) steps, so a killed run loses at most that many steps; at
      such a step with a validation after it, only after the validation (and whenever a top-k checkpoint is
      written), so that it records the validation's outcome (the best path that ``test --ckpt_path best`` reads
      from it), and a run killed during that validation resumes from the previous ``last.ckpt`` and validates
      at that step again: Lightning does not repeat a validation due at the step it resumes from, which would
      leave the curve and the best-checkpoint choice without it. (A time-based ``val_check_interval`` is not
      known in advance: there ``last.ckpt`` is written before the validation and again after it.)
    - at the end of ``fit``: after ``fit``, it always holds the final weights;
    - when the run is preempted (``SIGTERM``, ``SIGINT`` or ``SIGUSR1``, which
      :class:`~lightning_episodes.callbacks.PreemptionHandler`, or Lightning for ``SIGTERM``, turns into a
      ``SIGTERMException`` at the end of a training batch): it holds the state at that step.

    Resuming from it (``fit --ckpt_path last``) continues exactly where it was written. Every file is written
    atomically (a temporary file in the same folder, flushed to disk and renamed over the old one): a run killed,
    or a disk filling up, while a checkpoint is written keeps the previous ``last.ckpt``.

    Args:
        last_every_n_steps: write ``last.ckpt`` every this many global steps; 0 writes it only at the end of
            ``fit`` and with each top-k checkpoint. Default: 100.
        save_last: must be ``True`` (``last.ckpt`` is what this class is for; ``"link"`` would point at the
            latest top-k checkpoint, an older state).
        enable_version_counter: ``ModelCheckpoint``'s option, default ``False`` here: a new run in the same
            ``dirpath`` overwrites ``last.ckpt`` instead of writing ``last-v1.ckpt``, which neither
            ``--ckpt_path last`` nor ``--ckpt_path best`` would read.
        **kwargs: the other arguments of ``ModelCheckpoint`` (``dirpath``, ``monitor``, ``mode``, ``filename``,
            ``save_top_k``, ...).

    Raises:
        ValueError: if ``last_every_n_steps`` is not an integer >= 0, or ``save_last`` is not ``True``.

    Example::

        >>> checkpoint = ResumableCheckpoint(monitor="val/acc", mode="max", last_every_n_steps=50)
        >>> checkpoint.save_last, checkpoint.last_every_n_steps
        (True, 50)
    """

    def __init__(
        self,
        last_every_n_steps: int = 100,
        save_last: bool = True,
        enable_version_counter: bool = False,
        **kwargs: Any,
    ) -> None:
        if isinstance(last_every_n_steps, bool) or not isinstance(last_every_n_steps, int) or last_every_n_steps < 0:
            raise ValueError(f"last_every_n_steps must be an integer >= 0, got {last_every_n_steps!r}")
        if save_last is not True:
            raise ValueError(
                f"ResumableCheckpoint always writes last.ckpt: save_last must be true, got {save_last!r} "
                "(use pytorch_lightning's ModelCheckpoint for no last.ckpt)"
            )
        super().__init__(save_last=True, enable_version_counter=enable_version_counter, **kwargs)
        self.last_every_n_steps = last_every_n_steps
        #: the run's log folder (``<save_dir>/<name>/<version>``), kept in the checkpoints: a resumed run whose
        #: checkpoints have a ``dirpath`` continues logging there
        self.log_dir: str | None = None
        #: global step of the state in ``last.ckpt``, and how many times this run wrote it
        self._last_step: int | None = None
        self._last_writes = 0
        #: a global step whose ``last.ckpt`` waits for the validation after it
        self._deferred: int | None = None
        self._stage: str | None = None  # of the last `setup`: the Trainer's current stage
        #: the checkpoint the coming ``fit`` continues from, where the caller knows it before ``setup`` (the CLI's
        #: ``--ckpt_path``): a fit resuming from its own folder is not warned that the folder "is not empty"
        self.resume_path: str | Path | None = None

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            super().setup(trainer, pl_module, stage)
        # a folder holding only this run's lock file (lightning_episodes.run_folder), or the checkpoints that this
        # fit continues from, is not "not empty"
        expected = self.dirpath is not None and (
            {p.name for p in Path(self.dirpath).glob("*")} <= {LOCK_NAME}
            or (
                self.resume_path is not None and Path(self.resume_path).resolve().parent == Path(self.dirpath).resolve()
            )
        )
        for warning in caught:
            if not (expected and "exists and is not empty" in str(warning.message)):
                warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        self._last_step = self._deferred = None
        self._stage = stage
        if stage == "fit" and trainer.loggers:
            self.log_dir = trainer.log_dir  # a collective under DDP: every rank asks

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        with warnings.catch_warnings():
            if self._stage != "fit":  # `test --ckpt_path best` reads a run's checkpoint into a folder of its own
                warnings.filterwarnings("ignore", message="The dirpath has changed from")
            super().load_state_dict(state_dict)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "log_dir": self.log_dir}

    def _fitting(self, trainer: pl.Trainer) -> bool:
        return not _fast_dev_run(trainer) and trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking

    def _due(self, trainer: pl.Trainer) -> bool:
        n = self.last_every_n_steps
        return n > 0 and trainer.global_step % n == 0 and self._fitting(trainer)

    @override
    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        # ModelCheckpoint's save, written atomically: a kill or a full disk while writing keeps the previous file
        if trainer.is_global_zero:
            atomic_write(filepath, lambda temporary: trainer.save_checkpoint(temporary, self.save_weights_only))
        else:
            trainer.save_checkpoint(filepath, self.save_weights_only)  # collective; only rank 0 writes
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.after_save_checkpoint(proxy(self))

    @override
    def _save_last_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict[str, Any]) -> None:
        super()._save_last_checkpoint(trainer, monitor_candidates)
        self._last_step = trainer.global_step
        self._last_writes += 1

    def _write_last(self, trainer: pl.Trainer) -> None:
        # ModelCheckpoint skips every save at a step it has saved at: forget this one, so that a validation at the
        # same step still writes its top-k checkpoint
        previous = self._last_global_step_saved
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        self._last_global_step_saved = previous

    @staticmethod
    def _validation_follows(trainer: pl.Trainer) -> bool:
        # whether the fit loop validates right after this training batch, by the loop's own rule (the same in
        # every process); unknown in advance for a time-based interval
        loop = trainer.fit_loop.epoch_loop
        fetcher = trainer.fit_loop._data_fetcher
        if getattr(trainer, "_val_check_time_interval", None) is not None or fetcher is None:
            return False
        return bool(loop._should_check_val_fx(fetcher))

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if self._deferred is not None and self._last_step != self._deferred:
            self._write_last(trainer)  # the validation it waited for did not run (e.g. an empty val loader)
        self._deferred = None
        if self._due(trainer) and self._last_step != trainer.global_step:
            if self._validation_follows(trainer):
                self._deferred = trainer.global_step  # written after the validation, with it
            else:
                self._write_last(trainer)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        writes = self._last_writes
        super().on_validation_end(trainer, pl_module)
        # due at this step and not written since the validation (a top-k checkpoint writes last.ckpt too)
        if self._due(trainer) and self._last_writes == writes:
            self._write_last(trainer)
        self._deferred = None

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        if not _fast_dev_run(trainer) and self._last_step != trainer.global_step:
            self._write_last(trainer)

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # a preempted fit keeps its steps since the last write (any other exception may have left the state broken)
        preempted = isinstance(exception, SIGTERMException) and self._fitting(trainer)
        if preempted and self._last_step != trainer.global_step:
            self._write_last(trainer)


def checkpoint_callback(trainer: pl.Trainer) -> ModelCheckpoint | None:
    """The Trainer's first ``ModelCheckpoint`` (``ResumableCheckpoint`` included), or ``None``."""
    return next((cb for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint)), None)  # type: ignore[attr-defined]


def _logger_root(trainer: pl.Trainer) -> Path | None:
    """``<save_dir>/<name>``, the folder of the logger's run folders, where ``ModelCheckpoint`` without a
    ``dirpath`` writes (into ``<version>/checkpoints``); ``None`` without a logger."""
    if not trainer.loggers:
        return None
    logger = trainer.loggers[0]
    save_dir = logger.save_dir if logger.save_dir is not None else trainer.default_root_dir
    return Path(save_dir) / str(logger.name or "")


def last_checkpoints(trainer: pl.Trainer) -> list[Path]:
    """Every ``last.ckpt`` that the Trainer's checkpoint callback writes for this configuration, newest first.

    With a ``dirpath``, the ``last.ckpt`` in it. Without one, ``ModelCheckpoint`` writes into the logger's run
    folder (``<save_dir>/<name>/<version>/checkpoints``), a new one per run: the ``last.ckpt`` of each.

    Raises:
        FileNotFoundError: with what was looked for and where, if there is no checkpoint callback or no
            ``last.ckpt`` where it writes.
    """
    callback = checkpoint_callback(trainer)
    if callback is None or not callback.save_last:
        raise FileNotFoundError(
            "no checkpoint callback that writes last.ckpt (a ModelCheckpoint with save_last: true, e.g. "
            "lightning_episodes.callbacks.ResumableCheckpoint) is configured in trainer.callbacks"
        )
    name = callback.CHECKPOINT_NAME_LAST + callback.FILE_EXTENSION
    root = _logger_root(trainer)
    if callback.dirpath is not None:
        where, found = Path(callback.dirpath), [Path(callback.dirpath) / name]
    elif root is not None:
        where, found = root, list(root.glob(f"*/checkpoints/{name}"))
    else:
        where = Path(trainer.default_root_dir) / "checkpoints"
        found = [where / name]
    found = [path for path in found if path.exists()]
    if not found:
        pattern = f"{where}/<version>/checkpoints/{name}" if callback.dirpath is None and root is not None else where
        raise FileNotFoundError(f"no {name} in {pattern}: has a fit with this configuration saved one?")
    return sorted(found, key=lambda path: path.stat().st_mtime, reverse=True)


def find_last_checkpoint(trainer: pl.Trainer) -> Path:
    """The newest of :func:`last_checkpoints` (whatever config wrote it).

    Raises:
        FileNotFoundError: as :func:`last_checkpoints`.
    """
    return last_checkpoints(trainer)[0]


def continue_logger_version(trainer: pl.Trainer, run_dir: Path, step: int) -> None:
    """Make the loggers write into ``run_dir`` (``<root>/<version>``: the folder of the checkpoint without a
    ``dirpath``, or the log folder that :class:`ResumableCheckpoint` recorded) instead of a new version, so that a
    resumed run keeps one folder: its checkpoints (without a ``dirpath``), logs and test record.

    A ``CSVLogger`` deletes the ``metrics.csv`` of a folder it starts in: its rows up to ``step`` (the
    checkpoint's global step; later rows belong to steps that the resumed run repeats) are logged again.
    Loggers without a version of this kind (other than CSV and TensorBoard) start a new one, as they would.
    """
    for logger in trainer.loggers:
        root = getattr(logger, "root_dir", None)
        if root is None or Path(root).resolve() != run_dir.parent.resolve() or not hasattr(logger, "_version"):
            continue
        # the number of a `version_<n>` folder, as the logger gives it (a string would show as `v_num=on_0`)
        number = run_dir.name.removeprefix("version_")
        logger._version = int(number) if number.isdigit() and run_dir.name.startswith("version_") else run_dir.name
        if isinstance(logger, CSVLogger) and trainer.is_global_zero:
            _carry_csv_rows(logger, run_dir / "metrics.csv", step)


def _carry_csv_rows(logger: CSVLogger, metrics: Path, step: int) -> None:
    rows = []
    if metrics.is_file():
        with metrics.open(newline="") as handle:
            rows = [row for row in csv.DictReader(handle) if row.get("step") and int(row["step"]) <= step]
    with warnings.catch_warnings():
        # "Previous log files in this directory will be deleted": their rows are logged again just below
        warnings.filterwarnings("ignore", message=".*exists and is not empty.*")
        experiment = logger.experiment
    for row in rows:
        values = {key: float(value) for key, value in row.items() if key != "step" and value not in ("", None)}
        experiment.log_metrics(values, int(row["step"]))
