r"""
Offline reference model
^^^^^^^^^^^^^^^^^^^^^^^

The offline proposal of "Uniform Sampling over Episode Difficulty" (Arnold et al., NeurIPS 2021,
Sec. 3.2): a frozen model trained with plain episode sampling scores the episodes instead of the model
being trained. Before training it scores ``offline_episodes`` training episodes to fix the proposal ``q``
(for the normal: ``mu`` and ``sigma^2``, ddof 0); during training it scores every episode of every step
again, so each episode's weight uses the reference's difficulty of that same episode. It is evaluated the
same way both times: in eval mode with its own ``eval_batch_norm``, without gradients to it (MAML-type references still
adapt on the support set, which needs autograd).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import move_data_to_device, rank_zero_warn
from torch import Tensor

from lightning_episodes.algorithms.base import EpisodicModule
from lightning_episodes.algorithms.loading import checkpoint_info, load_episodic_module
from lightning_episodes.data.datamodule import EpisodicDataModule
from lightning_episodes.data.episode import Episode
from lightning_episodes.data.streams import EvaluationEpisodes
from lightning_episodes.models import set_eval_batch_norm
from lightning_episodes.weighting import Proposal
from lightning_episodes.weighting.loss import stat_dtype

__all__ = [
    "check_reference",
    "fit_offline",
    "load_reference",
    "module_dtype",
    "reference_difficulties",
    "restore_offline",
    "score_offline",
]


def module_dtype(module: torch.nn.Module) -> torch.dtype:
    """The floating-point dtype of ``module``'s parameters (float32 when it reports none)."""
    dtype = getattr(module, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else torch.float32


def check_reference(path: str | Path, ways: int | None) -> None:
    """Checks that ``path`` is a checkpoint of this library trained on ``ways``-way episodes.

    Args:
        path: the reference checkpoint.
        ways: the training ways of the data module (``None``: not checked).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if it is not a lightning-episodes checkpoint, or was trained on other ways.
    """
    try:
        info = checkpoint_info(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"reference_checkpoint={str(path)!r} does not exist") from None
    except ValueError as error:
        raise ValueError(f"reference_checkpoint: {error}") from None
    reference_ways = info.get("ways")
    if reference_ways is None:
        # written without a data module (e.g. a hand-built Trainer): nothing to compare
        rank_zero_warn(f"reference_checkpoint={str(path)!r} records no number of ways; it is assumed to match")
    elif ways is not None and reference_ways != ways:
        raise ValueError(
            f"reference_checkpoint={str(path)!r} was trained on {reference_ways}-way episodes but data.ways={ways}: "
            "the offline reference must be trained (with plain sampling) on the same number of ways"
        )


def load_reference(
    path: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> EpisodicModule:
    """Loads the reference model of ``path`` (any algorithm of this library), frozen and in eval mode.

    Args:
        path: a checkpoint written by an :class:`~lightning_episodes.EpisodicModule`.
        device: where to put it (the trained module's device).
        dtype: its floating-point dtype: the trained module's, which is the dtype episodes are assembled in
            (float64 under ``precision="64-true"``).

    Returns:
        The reference module: eval mode, its own ``eval_batch_norm`` and ``channels_last``; its parameters
        require no gradient unless its class adapts with gradients at evaluation (MAML, ANIL), which only
        reads them.
    """
    reference = load_episodic_module(path, map_location="cpu").to(device=device, dtype=dtype)
    reference.eval()
    set_eval_batch_norm(reference, reference.eval_batch_norm)
    if not type(reference).requires_grad_in_evaluation:
        reference.requires_grad_(False)
    return reference


def reference_difficulties(reference: EpisodicModule, batch: Episode) -> Tensor:
    """The reference model's detached difficulty of each episode of ``batch`` (shape ``[B]``).

    Example::

        >>> from lightning_episodes import ProtoNet
        >>> from lightning_episodes.data import EpisodeSampler, EpisodeAssembler
        >>> model = ProtoNet(image_size=16).eval()
        >>> images, labels = torch.zeros(20, 1, 16, 16, dtype=torch.uint8), torch.arange(4).repeat_interleave(5)
        >>> sampler = EpisodeSampler(labels, [0, 1, 2, 3], ways=2, shots=1, queries=2)
        >>> batch = EpisodeAssembler(images, (0.5,), (0.25,))(sampler.sample(0, "offline", 0, range(3)))
        >>> reference_difficulties(model, batch).shape
        torch.Size([3])
    """
    # MAML-type references adapt on the support set with autograd even when frozen
    adapts = type(reference).requires_grad_in_evaluation
    with torch.enable_grad() if adapts else torch.no_grad():
        out = reference._output(batch)  # the module's one return contract, checked
    return out.difficulty.detach()


def score_offline(
    reference: EpisodicModule,
    datamodule: EpisodicDataModule,
    count: int,
    device: torch.device,
    rank: int = 0,
    world_size: int = 1,
    gather: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """The reference's finite difficulties of ``count`` training episodes, in episode order, on every rank.

    The episodes are the ``"offline"`` stream over the *training* split's sampler (fixed by the data seed,
    distinct from the training stream). Rank ``r`` scores episodes ``r, r + W, ...``; ``gather`` (called on
    every rank) collects the scores of all ranks, so every rank gets the same values in the same order, whatever
    the number of processes. The proposal then fits ``q`` to them (the normal: mean and variance, ddof 0).

    Args:
        reference: the frozen reference model (see :func:`load_reference`), on ``device``; episodes are
            assembled in its dtype.
        datamodule: the set-up data module (its training sampler and assembler are used).
        count: number of training episodes to score (over all ranks).
        device: where episodes are assembled and scored.
        rank: this process's rank.
        world_size: number of processes.
        gather: all-gathers a tensor of equal shape on every rank into ``[W, ...]`` in rank order (e.g.
            ``trainer.strategy.all_gather``); ``None`` in one process.

    Returns:
        The finite difficulties as a float64 CPU tensor (non-finite ones are left out).

    Raises:
        ValueError: if fewer than 2 of the difficulties are finite.
    """
    # with a device cache the stream yields bare identities, gathered on the device by assemble()
    assembler = None if datamodule.device_cache else datamodule.assembler
    episodes = EvaluationEpisodes(
        datamodule.samplers["train"],
        datamodule.seed,
        "offline",
        count,
        datamodule.eval_episodes_per_batch,
        rank,
        world_size,
        assembler,
    )
    values: list[float] = []
    for batch in episodes:
        episode = datamodule.assemble(move_data_to_device(batch, device), dtype=module_dtype(reference))
        values.extend(reference_difficulties(reference, episode).to("cpu", torch.float64).tolist())

    # equal shapes for the collective: pad each rank's share to ceil(count / W) with NaN (dropped below)
    dtype = stat_dtype(device)
    local = torch.full((math.ceil(count / world_size),), math.nan, dtype=dtype)
    local[: len(values)] = torch.tensor(values, dtype=dtype)
    everything = gather(local.to(device)) if gather is not None else local
    # [W, n] in rank order; column-major order is episode order (episode i = j W + r), padding at the end
    ordered = everything.reshape(world_size, -1).to("cpu", torch.float64).T.flatten()[:count]
    finite = ordered[torch.isfinite(ordered)]
    if finite.numel() < 2:
        raise ValueError(
            f"the reference model gave fewer than 2 finite difficulties on offline_episodes={count} episodes"
        )
    return finite


def fit_offline(
    trainer: pl.Trainer, module: pl.LightningModule, reference: EpisodicModule, proposal: Proposal, episodes: int
) -> Tensor:
    """Fixes ``proposal`` from the reference's difficulties of ``episodes`` training episodes (on every rank).

    The reference scores in the precision context of a training step (e.g. autocast), as it will during training;
    under DDP each rank scores a share and :func:`score_offline` gathers them.

    Returns:
        The difficulties ``proposal`` was fitted to.

    Raises:
        ValueError: if the trainer's data module is not an :class:`~lightning_episodes.EpisodicDataModule`.
    """
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is None or not hasattr(datamodule, "samplers"):
        raise ValueError("DifficultyWeightingCallback(estimate='offline') needs an EpisodicDataModule")
    with trainer.precision_plugin.train_step_context():
        values = score_offline(
            reference, datamodule, episodes, module.device, trainer.global_rank, trainer.world_size,
            trainer.strategy.all_gather,  # every rank calls it
        )  # fmt: skip
    proposal.fit(values)
    return values


def restore_offline(proposal: Proposal, state: dict[str, Any], reference_checkpoint: str | None) -> int | None:
    """Restores an offline ``proposal`` from a weighting callback's checkpointed ``state``.

    Returns:
        The number of episodes the restored estimate was scored from (0: a checkpoint of an older version kept the
        estimates elsewhere: score again); ``None`` when nothing was restored: the checkpoint has no offline
        estimate, or one of another ``reference_checkpoint`` (with a warning).
    """
    offline = state.get("offline")
    if not (isinstance(offline, dict) and offline.get("episodes", 0) > 0):
        return None
    if offline.get("reference", reference_checkpoint) != reference_checkpoint:
        rank_zero_warn("reference_checkpoint differs from the checkpointed run's: its estimates are scored again")
        return None
    proposal.load_state_dict(state.get("estimator", {}))
    return int(offline["episodes"]) if proposal.ready else 0
