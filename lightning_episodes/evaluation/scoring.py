"""Scoring fixed episodes with a trained model: one difficulty and accuracy per episode (§4.2).

The episodes are a fixed set derived from the data seed: episode ``i`` of a split is a pure function of
``(seed, split, i)``, so two checkpoints scored with the same data settings score the same episodes and
their tables join by episode id (:func:`~lightning_episodes.evaluation.join_on_episode`). The difficulty is
what the algorithm's ``episode_losses`` defines (the query loss; FEAT's main cross-entropy), computed as at
evaluation: the model in eval mode with its own ``eval_batch_norm``, under ``no_grad`` (MAML and ANIL
still adapt on the support set with autograd), without changing any state of the model.

From the command line: ``lightning-episodes difficulty`` (:mod:`lightning_episodes.commands.difficulty`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import torch
from pytorch_lightning.utilities import move_data_to_device
from torch import Tensor

from lightning_episodes.algorithms.base import EpisodeOutput, EpisodicModule
from lightning_episodes.data.datamodule import EpisodicDataModule
from lightning_episodes.data.episode import EpisodeIdentity
from lightning_episodes.data.streams import EvaluationEpisodes
from lightning_episodes.evaluation.tables import DifficultyTable
from lightning_episodes.models import set_eval_batch_norm

Split = Literal["test", "validation", "train"]

#: The sampler and the seed stream behind each split. ``train`` episodes are the training classes with
#: the training sizes, drawn from the "offline" stream (the episodes an offline reference scores), which
#: never coincides with the training stream itself.
_STREAMS: dict[str, tuple[str, str]] = {
    "test": ("test", "test"),
    "validation": ("validation", "validation"),
    "train": ("train", "offline"),
}

__all__ = [
    "Split",
    "evaluation_mode",
    "checkpoint_datamodule",
    "score_batches",
    "score_episodes",
    "scoring_episodes",
    "scoring_identities",
]


def scoring_episodes(
    datamodule: EpisodicDataModule,
    split: Split = "test",
    count: int = 10_000,
    batch_size: int | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> EvaluationEpisodes:
    """The fixed set of ``count`` episodes of ``split`` that scoring uses (this rank's share).

    ``test`` and ``validation`` are the data module's own evaluation sets (``test`` follows its
    ``test_split``; the first ``test_episodes`` of them are the test set), with the evaluation sizes;
    ``train`` is a fixed set over the training classes with the training sizes. Episode ``i`` depends only
    on ``(seed, split, i)``, not on ``count``, ``batch_size`` or the number of processes; rank ``r`` of
    ``world_size`` takes the episodes ``i ≡ r (mod world_size)``.

    Args:
        datamodule: a set-up :class:`~lightning_episodes.EpisodicDataModule`.
        split: ``"test"`` (default), ``"validation"`` or ``"train"``.
        count: number of episodes over all ranks.
        batch_size: episodes per batch (default: the data module's ``eval_episodes_per_batch``).
        rank: this process's rank.
        world_size: number of processes.

    Raises:
        ValueError: for an unknown split or a non-positive ``count`` or ``batch_size``.
        RuntimeError: if the data module is not set up.
    """
    if split not in _STREAMS:
        raise ValueError(f"split must be one of {list(_STREAMS)}, got {split!r}")
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    sampler_name, stream = _STREAMS[split]
    if sampler_name not in datamodule.samplers or datamodule.assembler is None:
        raise RuntimeError("call datamodule.setup() before scoring episodes")
    return EvaluationEpisodes(
        datamodule.samplers[sampler_name],
        datamodule.seed,
        stream,
        count,
        batch_size or datamodule.eval_episodes_per_batch,
        rank,
        world_size,
        # with a device cache the set yields bare identities, gathered on the device by assemble()
        None if datamodule.device_cache else datamodule.assembler,
    )


def scoring_identities(datamodule: EpisodicDataModule, split: Split = "test", count: int = 10_000) -> EpisodeIdentity:
    """The identities of all ``count`` episodes of :func:`scoring_episodes`, in order, without their images.

    Raises:
        ValueError: for an unknown split or a non-positive ``count``.
        RuntimeError: if the data module is not set up.
    """
    scoring_episodes(datamodule, split, count)  # validates the arguments and the set-up
    sampler_name, stream = _STREAMS[split]
    return datamodule.samplers[sampler_name].sample(datamodule.seed, stream, 0, range(count))


@contextlib.contextmanager
def evaluation_mode(module: EpisodicModule) -> Iterator[None]:
    """Evaluate ``module`` as validation does, and restore every submodule's train/eval flag afterwards.

    Inside: eval mode, batch norm with the module's ``eval_batch_norm``, and ``no_grad`` (``enable_grad``
    for algorithms that adapt with gradients at evaluation, as MAML and ANIL do).
    """
    flags = {m: m.training for m in module.modules()}
    module.eval()
    set_eval_batch_norm(module, module.eval_batch_norm)
    adapts = type(module).requires_grad_in_evaluation
    try:
        # inference_mode(False): MAML's adaptation needs autograd even when called from inference code
        with torch.inference_mode(False), torch.enable_grad() if adapts else torch.no_grad():
            yield
    finally:
        for submodule, training in flags.items():
            submodule.training = training


def score_batches(
    module: EpisodicModule, datamodule: EpisodicDataModule, episodes: EvaluationEpisodes
) -> tuple[EpisodeIdentity, Tensor, Tensor]:
    """Score every batch of ``episodes`` (the caller sets the mode, see :func:`evaluation_mode`).

    Returns:
        The CPU identities of the scored episodes in order, with their float64 difficulties and accuracies.
    """
    device = module.device
    dtype = module.dtype if isinstance(module.dtype, torch.dtype) else torch.float32
    identities, difficulties, accuracies = [], [], []
    for batch in episodes:
        episode = datamodule.assemble(move_data_to_device(batch, device), dtype=dtype)
        out: EpisodeOutput = module.episode_losses(episode)
        identities.append(move_data_to_device(episode.identity, "cpu"))
        difficulties.append(out.difficulty.to("cpu", torch.float64))
        accuracies.append(out.accuracies.detach().to("cpu", torch.float64))
    if not identities:
        empty = torch.zeros(0, dtype=torch.float64)
        return EpisodeIdentity(*(torch.zeros(0, dtype=torch.long) for _ in range(4))), empty, empty
    return EpisodeIdentity.cat(identities), torch.cat(difficulties), torch.cat(accuracies)


def score_episodes(
    module: EpisodicModule,
    datamodule: EpisodicDataModule,
    count: int = 10_000,
    split: Split = "test",
    batch_size: int | None = None,
) -> DifficultyTable:
    """Each of ``count`` fixed episodes' difficulty and accuracy under ``module`` (§4.2).

    The module is evaluated on its own device as at validation (see the module docstring) and left as it
    was. The episodes are those of :func:`scoring_episodes`: the same for any model, batch size and
    ``count`` (a larger ``count`` extends the set), so tables of two checkpoints join by episode id.

    Args:
        module: any :class:`~lightning_episodes.EpisodicModule` (e.g. from
            :func:`~lightning_episodes.algorithms.loading.load_episodic_module`).
        datamodule: the data to score on; ``setup()`` is called if it has not been.
        count: number of episodes (default 10,000 as in the paper).
        split: ``"test"`` (default), ``"validation"`` or ``"train"``.
        batch_size: episodes per forward pass (default: ``datamodule.eval_episodes_per_batch``); it changes
            speed and memory, not the scores.

    Returns:
        A :class:`~lightning_episodes.evaluation.DifficultyTable` with one row per episode, by episode id.

    Raises:
        ValueError: for an unknown split or a non-positive ``count`` or ``batch_size``.

    Example::

        >>> from lightning_episodes import EpisodicDataModule, ProtoNet
        >>> datamodule = EpisodicDataModule(dataset="glyphs", ways=5, shots=1)  # doctest: +SKIP
        >>> table = score_episodes(ProtoNet(), datamodule, count=100)  # doctest: +SKIP
        >>> len(table), table.episode_ids[:3].tolist()  # doctest: +SKIP
        (100, [0, 1, 2])
    """
    if datamodule.assembler is None or not datamodule.samplers:
        datamodule.setup("test")
    episodes = scoring_episodes(datamodule, split, count, batch_size)
    with evaluation_mode(module):
        identity, difficulty, accuracy = score_batches(module, datamodule, episodes)
    return DifficultyTable.from_arrays(
        identity.episode_ids,
        identity.classes,
        identity.support_indices,
        identity.query_indices,
        difficulty,
        accuracy,
    )


def checkpoint_datamodule(ckpt_path: str | Path, overrides: Mapping[str, Any] | None = None) -> EpisodicDataModule:
    """The data module a checkpoint was trained with (its saved hyper-parameters), so that its test episodes are
    the fixed episodes the run's test evaluated, with ``overrides`` of some of its arguments.

    Raises:
        FileNotFoundError: if ``ckpt_path`` does not exist.
        ValueError: if the checkpoint saved no data settings and none are given, for an unknown argument, or a
            broken checkpoint file (a :class:`~lightning_episodes.algorithms.loading.CheckpointError`).
    """
    from lightning_episodes.algorithms.loading import read_checkpoint

    saved = read_checkpoint(ckpt_path).get("datamodule_hyper_parameters") or {}
    # LightningCLI saves its bookkeeping (`_class_path`, `_instantiator`) with them: not data module arguments
    arguments = {key: value for key, value in saved.items() if not key.startswith("_")}
    # the task sampler chose training episodes only (its record, a class path and init_args, may need what the run
    # had, such as a static DPP's reference checkpoint): evaluation episodes never use one
    arguments.pop("task_sampler", None)
    arguments.update(overrides or {})
    if not arguments:
        raise ValueError(f"{ckpt_path} records no data module settings: give them with --config or --data.KEY")
    try:
        return EpisodicDataModule(**arguments)
    except TypeError as error:  # an unknown keyword
        raise ValueError(f"invalid data option: {error}") from None
