"""Scoring fixed episodes with a trained model: one difficulty and accuracy per episode (§4.2).

The episodes are a fixed set derived from the data seed: episode ``i`` of a split is a pure function of
``(seed, split, i)``, so two checkpoints scored with the same data settings score the same episodes and
their tables join by episode id (:func:`~lightning_episodes.analysis.join_on_episode`). The difficulty is
what the algorithm's ``episode_losses`` defines (the query loss; FEAT's main cross-entropy), computed as at
evaluation: the model in eval mode with its own ``eval_batch_norm``, under ``no_grad`` (MAML and ANIL
still adapt on the support set with autograd), without changing any state of the model.

From the command line (``lightning-episodes difficulty``, see :func:`main`)::

    lightning-episodes difficulty --ckpt_path runs/a/checkpoints/last.ckpt --output a.csv
    lightning-episodes difficulty --ckpt_path runs/b/checkpoints/last.ckpt --output b.csv --episodes 2000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import torch
import yaml
from pytorch_lightning.utilities import move_data_to_device
from torch import Tensor

from lightning_episodes.algorithms.base import EpisodeOutput, EpisodicModule
from lightning_episodes.analysis.tables import DifficultyTable
from lightning_episodes.data.datamodule import EpisodicDataModule
from lightning_episodes.data.episode import EpisodeIdentity
from lightning_episodes.data.streams import EvaluationEpisodes
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
    "main",
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
        out = module.episode_losses(episode)
        if isinstance(out, tuple):  # a (losses, accuracies) pair is accepted, as in training
            out = EpisodeOutput(*out)
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
        A :class:`~lightning_episodes.analysis.DifficultyTable` with one row per episode, by episode id.

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


# -- command line ---------------------------------------------------------------------------------------------

_DESCRIPTION = """\
Score fixed episodes with a checkpoint and write one CSV row per episode: its identity (classes, support
and query indices), its difficulty (the query loss) and its accuracy.

The data settings are those the checkpoint was trained with (its saved data module hyper-parameters),
updated by the `data:` section of each --config file (a fit config works as is) and then by --data.KEY
options (any EpisodicDataModule argument: --data.seed 1, --data.eval_shots 5, ...), in that order.
Two checkpoints scored with the same data settings score the same episodes, so their tables join by
episode id. A JSON file next to the CSV records what was scored and how.

example:
  lightning-episodes difficulty --ckpt_path runs/a/checkpoints/last.ckpt --output a.csv --episodes 2000
  lightning-episodes difficulty --ckpt_path b.ckpt --output b.csv --config configs/quickstart.yaml \\
      --data.test_split validation
"""


def _data_section(path: str) -> dict[str, Any]:
    """The data module's arguments in a YAML config (``data: {class_path, init_args}`` or ``data: {...}``)."""
    with open(path, encoding="utf-8") as handle:
        config = yaml.safe_load(handle) or {}
    data = config.get("data", {}) if isinstance(config, dict) else {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: `data` must be a mapping, got {data!r}")
    return dict(data.get("init_args", {}) if "class_path" in data or "init_args" in data else data)


def _data_options(extra: Sequence[str]) -> dict[str, Any]:
    """``--data.KEY VALUE`` or ``--data.KEY=VALUE`` pairs, values read as YAML (``5``, ``null``, ``glyphs``)."""
    options: dict[str, Any] = {}
    items = list(extra)
    while items:
        item = items.pop(0)
        if not item.startswith("--data."):
            raise ValueError(f"unrecognised argument {item!r} (data options are --data.KEY VALUE)")
        key, sep, value = item[len("--data.") :].partition("=")
        if not sep:
            if not items:
                raise ValueError(f"{item} needs a value")
            value = items.pop(0)
        options[key.removeprefix("init_args.")] = yaml.safe_load(value)
    return options


def checkpoint_datamodule(
    ckpt_path: str | Path, configs: Sequence[str] = (), options: dict[str, Any] | None = None
) -> EpisodicDataModule:
    """The data module a checkpoint was trained with (its saved hyper-parameters), so that its test episodes are
    the fixed episodes the run's test evaluated; updated by each config's ``data:`` section, then by ``options``.

    Raises:
        FileNotFoundError: if ``ckpt_path`` does not exist.
        ValueError: if the checkpoint saved no data settings and none are given, for an unknown argument, or a
            broken checkpoint file (a :class:`~lightning_episodes.algorithms.loading.CheckpointError`).
    """
    from lightning_episodes.algorithms.loading import read_checkpoint

    saved = read_checkpoint(ckpt_path).get("datamodule_hyper_parameters") or {}
    # LightningCLI saves its bookkeeping (`_class_path`, `_instantiator`) with them: not data module arguments
    arguments = {key: value for key, value in saved.items() if not key.startswith("_")}
    for config in configs:
        arguments.update(_data_section(config))
    arguments.update(options or {})
    if not arguments:
        raise ValueError(f"{ckpt_path} records no data module settings: give them with --config or --data.KEY")
    try:
        return EpisodicDataModule(**arguments)
    except TypeError as error:  # an unknown keyword
        raise ValueError(f"invalid data option: {error}") from None


#: Help of the ``--device`` option of the analysis commands.
DEVICE_HELP = "cpu, cuda, cuda:1, mps or auto (default: cuda if available, else cpu)"


def resolve_device(name: str) -> torch.device:
    """A ``--device`` value as a device: ``auto`` is CUDA when available, else the CPU.

    Raises:
        ValueError: if ``name`` is not a device name.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device {name!r} is not a device (cpu, cuda, cuda:1, mps or auto)") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lightning-episodes difficulty",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--ckpt_path", required=True, help="checkpoint of any algorithm of this library")
    parser.add_argument("--output", required=True, help="CSV file to write (its folder is created)")
    parser.add_argument("--episodes", type=int, default=10_000, help="episodes to score (default: 10000)")
    parser.add_argument("--split", choices=get_args(Split), default="test", help="whose fixed episodes (default: test)")
    parser.add_argument("--batch_size", type=int, default=None, help="episodes per forward pass")
    parser.add_argument("--config", action="append", default=[], help="YAML with a `data:` section (repeatable)")
    parser.add_argument("--device", default="auto", help=DEVICE_HELP)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``lightning-episodes difficulty``: score fixed episodes with a checkpoint and write a CSV.

    Args:
        argv: the arguments after ``difficulty`` (default: ``sys.argv[2:]``); see ``--help``.

    Returns:
        0 on success (argument errors exit through ``argparse`` with status 2).
    """
    from lightning_episodes.algorithms.loading import load_episodic_module

    parser = _parser()
    args, extra = parser.parse_known_args(sys.argv[2:] if argv is None else list(argv))
    try:
        device = resolve_device(args.device)
    except ValueError as error:
        parser.error(str(error))
    try:
        options = _data_options(extra)
        if args.episodes < 1:
            raise ValueError(f"--episodes must be >= 1, got {args.episodes}")
        module = load_episodic_module(args.ckpt_path, map_location=device)
        datamodule = checkpoint_datamodule(args.ckpt_path, args.config, options)
    except (ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    table = score_episodes(module, datamodule, args.episodes, args.split, args.batch_size)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    table.write(output)
    difficulty = table.difficulty[np.isfinite(table.difficulty)]
    record = {
        "checkpoint": str(args.ckpt_path),
        "algorithm": type(module).__name__,
        "eval_batch_norm": module.eval_batch_norm,
        "split": args.split,
        "episodes": len(table),
        "difficulty_mean": float(difficulty.mean()) if difficulty.size else None,
        "difficulty_std": float(difficulty.std()) if difficulty.size else None,
        "accuracy_mean": float(table.accuracy.mean()),
        "data": {k: v for k, v in datamodule.hparams.items() if v is None or isinstance(v, int | float | str | bool)},
    }
    # scores.csv -> scores.json (scores.json.json if the table itself is called .json)
    metadata = output.with_suffix(".json") if output.suffix != ".json" else output.with_name(output.name + ".json")
    metadata.write_text(json.dumps(record, indent=2, sort_keys=True))
    spread = "no finite difficulty" if not difficulty.size else f"{difficulty.mean():.4f} ± {difficulty.std():.4f}"
    print(
        f"scored {len(table)} {args.split} episodes with {record['algorithm']} ({args.ckpt_path}): "
        f"difficulty {spread}, accuracy {record['accuracy_mean']:.4f} -> {output}"
    )
    return 0
