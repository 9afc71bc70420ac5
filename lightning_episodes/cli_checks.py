"""What the command line checks before a Trainer method runs: the accelerator is there, the training batch divides
among the processes, a batch of episodes fits in memory, a bfloat16 precision runs on instructions for it, and every
output folder can be written (the checkpoint folder owned by this run alone)."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.utilities import rank_zero_warn

from lightning_episodes.algorithms.base import EpisodicModule
from lightning_episodes.algorithms.memory import MIXED_LOWER, BatchShape, available_memory, episode_batch_bytes
from lightning_episodes.callbacks.checkpointing import checkpoint_callback
from lightning_episodes.commands._common import available_devices
from lightning_episodes.data.datamodule import EpisodicDataModule
from lightning_episodes.evaluation.record import bf16_extensions, native_bf16, processor
from lightning_episodes.models import module_class
from lightning_episodes.run_folder import owned_folders

#: ``trainer.accelerator`` values that need a device, and how to tell whether it is there.
_DEVICES = {"gpu": "cuda", "cuda": "cuda", "mps": "mps"}


def check_accelerator(trainer: Any) -> None:
    """Check that the parsed ``trainer.accelerator`` names a device this machine has.

    Raises:
        ValueError: naming the option and the available devices, for ``gpu``/``cuda``/``mps`` without one.
    """
    value = trainer.get("accelerator") if hasattr(trainer, "get") else None
    kind = _DEVICES.get(str(value).lower()) if isinstance(value, str) else None
    if kind is not None and kind not in available_devices():
        raise ValueError(
            f"--trainer.accelerator {value}: this machine has no {kind.upper()} device (available: "
            f"{', '.join(available_devices())}; auto picks the best of them)"
        )


def backbone_class_path(model: Any) -> str | None:
    """The class path of the parsed ``model.init_args.backbone`` (``None`` for a registered backbone's name)."""
    value = model
    for key in ("init_args", "backbone", "class_path"):  # a Namespace or a dict at each level
        get = getattr(value, "get", None)
        value = get(key) if callable(get) else None
    return value if isinstance(value, str) else None


def check_backbone(model: Any) -> None:
    """Check, before anything is instantiated, that a ``model.backbone`` class path names an ``nn.Module`` class: a
    function that returns one (``torchvision.models.resnet18``) is refused, as in checkpoints.

    Raises:
        ValueError: naming ``model.backbone`` and the class path.
    """
    class_path = backbone_class_path(model)
    if class_path is not None:
        try:
            module_class(class_path)
        except ValueError as error:
            raise ValueError(f"model.backbone: {error}") from None


def check_world_size(trainer: pl.Trainer, datamodule: Any) -> None:
    """The data module's check that its batch divides among the processes, before the strategy starts them.

    Raises:
        ValueError: if ``data.episodes_per_batch`` is not divisible by the number of devices times nodes.
    """
    if isinstance(datamodule, EpisodicDataModule):
        datamodule.check_world_size(trainer.world_size)


#: The share of the available memory above which a batch of episodes is said to leave little room (a warning).
MEMORY_WARNING_SHARE = 0.8


def check_memory(trainer: pl.Trainer, model: Any, datamodule: Any, subcommand: str) -> None:
    """Check that a batch of episodes fits in the memory this machine has available, before any step: a training
    batch (``fit``) and an evaluation batch (every subcommand), estimated by
    :func:`~lightning_episodes.algorithms.memory.episode_batch_bytes` for the configured algorithm, backbone, sizes,
    device and precision. On a CPU the processes of the machine share its memory. A mixed precision is estimated
    between its lower dtype's true precision and float32 (:data:`~lightning_episodes.algorithms.memory.MIXED_LOWER`):
    refused only if even the lower bound does not fit, a warning if the upper one leaves little room. Says nothing
    where the estimate or the available memory cannot be had.

    Raises:
        ValueError: in one line with the estimate, the available memory and the options that drive it, if a batch
            needs more than is available (above :data:`MEMORY_WARNING_SHARE` of it, a warning).
    """
    if not isinstance(model, EpisodicModule) or not isinstance(datamodule, EpisodicDataModule):
        return
    device = trainer.strategy.root_device
    if device.type == "cuda" and getattr(trainer.strategy, "_start_method", None) == "fork":
        return  # asking CUDA would initialise it, and the processes of ddp_fork cannot fork after that
    available = available_memory(device)
    if available is None:
        return
    data = datamodule
    side = {"channels": data.channels, "image_size": data.image_size}
    stages = [("evaluation", BatchShape(data.eval_episodes_per_batch, data.eval_ways, data.eval_shots,
                                        data.eval_queries, **side), "eval_")]  # fmt: skip
    if subcommand == "fit":
        episodes = data.episodes_per_batch // trainer.world_size
        stages.insert(0, ("training", BatchShape(episodes, data.ways, data.shots, data.queries, **side), ""))
    processes = trainer.num_devices if device.type == "cpu" else 1
    precision = str(trainer.precision)
    for stage, shape, prefix in stages:
        try:  # a mixed precision: at least its lower dtype's true precision, at most float32
            low = high = processes * episode_batch_bytes(model, shape, stage == "training", device, precision)
            if precision in MIXED_LOWER:
                low = processes * episode_batch_bytes(model, shape, stage == "training", device, MIXED_LOWER[precision])
        except RuntimeError:
            return  # an algorithm that reads values in its step: no estimate
        if high <= MEMORY_WARNING_SHARE * available:
            continue
        per_episode = f"{prefix}shots {shape.shots} + {prefix}queries {shape.queries}"
        backbone = type(getattr(model, "backbone", model)).__name__
        sizes = (
            f"between {_size(low)} ({MIXED_LOWER[precision]}) and {_size(high)} (float32)"
            if precision in MIXED_LOWER
            else f"about {_size(high)}"
        )
        what = (
            f"a batch of episodes needs {sizes} in {stage} (data.{prefix}ways {shape.ways} x "
            f"({per_episode}) images x {prefix}episodes_per_batch {shape.episodes}"
            f"{f' x {processes} processes' if processes > 1 else ''}, {backbone} activations)"
        )
        lower = f"lower data.{prefix}ways, data.{prefix}queries or data.{prefix}episodes_per_batch"
        if low > available:
            raise ValueError(f"{what}, more than the {_size(available)} available on {device.type}; {lower}")
        share = f"{high / available:.0%} of the {_size(available)} available on {device.type}"
        share = f"up to {share}" if precision in MIXED_LOWER else share
        rank_zero_warn(f"{what}: {share}, which leaves little room; {lower} if the run is killed for memory")


def check_precision(trainer: pl.Trainer, cpuinfo: str | None = None) -> None:
    """Warn, in one line, when the Trainer computes in bfloat16 on a CPU without instructions for it (neither
    AVX-512 BF16 nor AMX, nor Arm's ``bf16``): PyTorch then emulates bfloat16, and a step takes several times
    float32's (6-9x for a conv4 on an AMD EPYC with AVX2 and no AVX-512; ``benchmarks/batchnorm.py``). Says nothing
    on other devices, other precisions, or where the CPU's instructions cannot be read.

    Args:
        trainer: the Trainer the command built.
        cpuinfo: the text of ``/proc/cpuinfo`` (``None``: this machine's).
    """
    precision = str(trainer.precision)
    if not precision.startswith("bf16") or trainer.strategy.root_device.type != "cpu":
        return
    if native_bf16(cpuinfo) is False:
        name, flags = processor(cpuinfo)
        rank_zero_warn(
            f"--trainer.precision {precision}: this CPU ({name}{f' [{flags}]' if flags else ''}) has no bfloat16 "
            f"instructions ({bf16_extensions(cpuinfo)}), so PyTorch emulates them and a step takes several times "
            "float32's; --trainer.precision 32-true --model.channels_last true is the fastest setting here"
        )


def _size(size: int) -> str:
    """``12.3 GiB``, or ``45.6 MiB`` below a GiB."""
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"


def checkpoint_folder(trainer: pl.Trainer) -> Path | None:
    """The folder the Trainer's checkpoint callback will write into (as ``ModelCheckpoint`` resolves it), or
    ``None`` without a checkpoint callback."""
    callback = checkpoint_callback(trainer)
    if callback is None:
        return None
    if callback.dirpath is not None:
        return Path(callback.dirpath)
    if trainer.loggers:
        logger = trainer.loggers[0]
        version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
        save_dir = logger.save_dir if logger.save_dir is not None else trainer.default_root_dir
        return Path(save_dir) / str(logger.name) / version / "checkpoints"
    return Path(trainer.default_root_dir) / "checkpoints"


def logger_folders(trainer: pl.Trainer) -> list[Path]:
    """The folders the Trainer's loggers write into (a run folder if they have one, else their ``save_dir``)."""
    folders = []
    for logger in trainer.loggers:
        folder = getattr(logger, "log_dir", None) or logger.save_dir
        if folder is not None:
            folders.append(Path(folder))
    return folders


@contextlib.contextmanager
def own_outputs(trainer: pl.Trainer, lock: bool) -> Iterator[None]:
    """Check that the logger and checkpoint folders can be written (creating them), and with ``lock`` take the
    checkpoint folder for this run alone, for the duration of the block (see :mod:`lightning_episodes.run_folder`).

    Raises:
        OutputPathError: naming a folder that cannot be written, or (``RunFolderLockedError``) the checkpoint
            folder and the run that holds it.
    """
    folders = [(folder, "logger folder") for folder in logger_folders(trainer)]
    checkpoints = checkpoint_folder(trainer) if lock and trainer.checkpoint_callback is not None else None
    command = " ".join(sys.argv)
    with owned_folders(checkpoints, folders, f"command: {command[:200]}", then=lambda: _start_csv_loggers(trainer)):
        yield


def _start_csv_loggers(trainer: pl.Trainer) -> None:
    # a CSV logger warns about a non-empty run folder: start it before the checkpoint folder appears in that folder
    for logger in trainer.loggers:
        if isinstance(logger, CSVLogger):
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*exists and is not empty.*")
                logger.experiment  # noqa: B018  (creates the experiment)
