"""EpisodicDataModule: reproducible episode streams over any registered dataset."""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from lightning_fabric.utilities.apply_func import move_data_to_device
from torch.utils.data import DataLoader
from typing_extensions import override

from lightning_episodes.data.assembly import EpisodeAssembler
from lightning_episodes.data.augment import RandomShiftFlip
from lightning_episodes.data.datasets import ImageDataset, load_dataset
from lightning_episodes.data.episode import Episode, EpisodeIdentity
from lightning_episodes.data.interpolation import TaskInterpolation
from lightning_episodes.data.sampler import EpisodeSampler, keep_classes, keep_per_class
from lightning_episodes.data.streams import EvaluationEpisodes, TrainingEpisodes
from lightning_episodes.data.task_samplers import TaskFeedback, TaskSampler

#: The smallest value of each size where given (``None`` stands for a default), in the order they are checked: an
#: episode needs two classes to tell apart (a 1-way one is always right, with zero loss), everything else one.
_MINIMUM = {"ways": 2, "eval_ways": 2} | dict.fromkeys(
    ("shots", "queries", "eval_shots", "eval_queries", "episodes_per_batch", "eval_episodes_per_batch",
     "val_episodes", "test_episodes", "image_size", "channels", "train_images_per_class"),
    1,
)  # fmt: skip


#: The start of Lightning's warning about an ``IterableDataset`` with a length (``has_len_all_ranks``).
_LENGTH_WARNING = r"Your `IterableDataset` has `__len__` defined"


class EpisodicDataModule(pl.LightningDataModule):
    """Batches of few-shot episodes: a step-indexed training stream and fixed evaluation sets.

    Episode ``j`` of global step ``s`` is a pure function of ``(seed, s, j)``; ``episodes_per_batch`` is the
    *global* batch and each DDP rank takes its slice, so training sees the same episodes on any number of
    devices and workers, and a resumed run continues the same stream. Validation and test episodes are
    fixed sets derived from ``seed``: the same episodes for every model and sampling scheme.

    ``train_images_per_class`` makes the training split scarce (a regime where a model over-fits even on a CPU
    budget): training episodes draw from that many images of each training class, chosen by ``seed`` alone (see
    :func:`~lightning_episodes.data.keep_per_class`). ``train_classes`` keeps a fixed subset of the training
    classes instead (over-fitting to classes rather than images, as MLTI's miniImagenet-S keeps 20% of Mini-ImageNet's):
    the same classes for every run of the dataset (see :func:`~lightning_episodes.data.keep_classes`). Both compose.

    Args:
        dataset: registered dataset name (``glyphs`` ships with the library; see ``available_datasets()``).
        root: dataset folder or cache folder (``None``: the dataset's default).
        ways: classes per training episode, >= 2.
        shots: support samples per class in training.
        queries: query samples per class in training (15 is the field's convention).
        eval_ways: classes per validation/test episode, >= 2 (default: ``ways``).
        eval_shots: support samples per class in evaluation (default: ``shots``).
        eval_queries: query samples per class in evaluation (default: ``queries``).
        episodes_per_batch: episodes per training step over all devices (must divide by the device count).
        eval_episodes_per_batch: episodes per evaluation batch on each device (default: ``episodes_per_batch``).
        train_episodes_per_epoch: episodes per training epoch; ``None``: one endless epoch driven by
            ``trainer.max_steps``.
        val_episodes: size of the fixed validation set.
        test_episodes: size of the fixed test set.
        test_split: the split that ``test`` evaluates (``validation`` or ``train`` for analyses).
        image_size: image height and width in pixels (images are resized; 84 for the ImageNet-derived sets).
        channels: image channels (1 for ``glyphs``, 3 for natural images).
        augment: random shifts of the training images (no augmentation by default, as in the paper).
        device_cache: keep the whole uint8 dataset on the accelerator and assemble episodes there.
        num_workers: dataloader worker processes (0 assembles in the main process, usually fastest).
        seed: the data seed; it fixes every training, validation and test episode.
        train_seed: seed of the training stream (and its augmentation) alone (default: ``seed``): runs that
            differ in it train on different episodes and are evaluated on the same fixed episodes.
        train_images_per_class: keep only this many images of every training class, >= ``shots + queries``
            (default: every image). The images are chosen by ``seed`` alone, so every run with the same data seed
            (any ``train_seed``, model seed, sampling scheme, worker or device count) trains on the same images,
            and the subsets are nested: the images kept for 20 are among those kept for 30. Validation and test
            are untouched.
        train_classes: keep only some of the training split's classes: a fraction of them in ``(0, 1]``, keeping
            ``floor(fraction * classes)`` (0.2 of Mini-ImageNet's 64 keeps 12, as MLTI's miniImagenet-S), or a count, a
            whole number from ``ways`` to the split's classes (``12``; ``12.0`` alike: the value decides, not its
            type, so 1 is every class). At least ``ways`` classes must remain. Default: every class. The kept classes
            are the first ones of a fixed random order of the class ids with the constant seed 0
            (:func:`~lightning_episodes.data.keep_classes`): a pure function of the dataset and this option, not of
            ``seed``, ``train_seed``, the model, the sampling scheme, workers or devices, and nested (the classes kept
            for 12 are among those kept for 20). Validation and test are untouched; task samplers choose among the
            kept classes.
        download: let loaders of downloadable datasets fetch missing files.
        task_sampler: chooses the classes of each training episode instead of the uniform choice (a
            :class:`~lightning_episodes.data.TaskSampler`: the literature's adaptive task sampling, hard-task mining,
            no-diversity controls; in YAML a ``class_path`` and its ``init_args``). The choice is a pure function of
            ``(train_seed, step, j, the sampler's state)``, made when the step's batch reaches the model (the loader
            runs ahead); an adaptive sampler learns from the model through the
            :class:`~lightning_episodes.callbacks.TaskSamplerFeedback` callback, and its state is checkpointed with the
            data module. Default: ``None`` (uniform classes).
        task_interpolation: mixes each training episode with the next one of its step (a
            :class:`~lightning_episodes.data.TaskInterpolation`: MLTI's CutMix of tasks; in YAML a ``class_path`` and
            its ``init_args``; also its :meth:`~lightning_episodes.data.TaskInterpolation.config` mapping, as a
            checkpoint records it). Applied on the device after normalisation, to training batches only (and to
            :meth:`training_episodes`); a pure function of ``(train_seed, step, j)``, exact under DDP and on resume.
            Default: ``None`` (no mixing).

    Raises:
        ValueError: for non-positive sizes, 1-way episodes, ``train_images_per_class`` below ``shots + queries`` or
            ``train_classes`` neither a fraction in ``(0, 1]`` nor a whole number >= ``ways`` (at construction) and,
            at setup, for requests the dataset cannot satisfy (more ways than classes, shots + queries or
            ``train_images_per_class`` above the smallest class, ``train_classes`` above the split's classes or a
            fraction keeping fewer than ``ways``) or a batch that does not divide by the number of devices.
    """

    def __init__(
        self,
        dataset: str = "glyphs",
        root: str | None = None,
        ways: int = 5,
        shots: int = 5,
        queries: int = 15,
        eval_ways: int | None = None,
        eval_shots: int | None = None,
        eval_queries: int | None = None,
        episodes_per_batch: int = 16,
        eval_episodes_per_batch: int | None = None,
        train_episodes_per_epoch: int | None = None,
        val_episodes: int = 1000,
        test_episodes: int = 1000,
        test_split: Literal["test", "validation", "train"] = "test",
        image_size: int = 28,
        channels: int = 1,
        augment: bool = False,
        device_cache: bool = False,
        num_workers: int = 0,
        seed: int = 0,
        train_seed: int | None = None,
        train_images_per_class: int | None = None,
        train_classes: int | float | None = None,
        download: bool = False,
        task_sampler: TaskSampler | None = None,
        task_interpolation: TaskInterpolation | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["task_sampler", "task_interpolation"])
        if task_sampler is not None and not isinstance(task_sampler, TaskSampler):
            raise ValueError(f"data.task_sampler must be a TaskSampler, got {type(task_sampler).__name__}")
        self.task_sampler = task_sampler
        if task_sampler is not None:
            # the record keeps what the sampler is, as its class path and init_args (plain values, as a YAML config
            # names it); plain runs keep the hyper-parameters, and so the scenario hash, they had
            sampler_config = task_sampler.config()
            self.hparams["task_sampler"] = sampler_config
            vars(self)["_hparams_initial"]["task_sampler"] = copy.deepcopy(sampler_config)
        if isinstance(task_interpolation, Mapping):  # a checkpoint's record of it (rebuilding the data module)
            task_interpolation = TaskInterpolation.from_config(task_interpolation)
        if task_interpolation is not None and not isinstance(task_interpolation, TaskInterpolation):
            raise ValueError(
                f"data.task_interpolation must be a TaskInterpolation, got {type(task_interpolation).__name__}"
            )
        self.task_interpolation = task_interpolation
        if task_interpolation is not None:
            # its class path and init_args, plain values (as a YAML config names it), for checkpoints and the loggers
            config = task_interpolation.config()
            self.hparams["task_interpolation"] = config
            vars(self)["_hparams_initial"]["task_interpolation"] = copy.deepcopy(config)
        for name, minimum in _MINIMUM.items():
            if self.hparams[name] is not None and self.hparams[name] < minimum:
                raise ValueError(f"data.{name} must be >= {minimum}, got {self.hparams[name]}")
        if train_episodes_per_epoch is not None and train_episodes_per_epoch < episodes_per_batch:
            raise ValueError(
                f"data.train_episodes_per_epoch={train_episodes_per_epoch} must be >= "
                f"data.episodes_per_batch={episodes_per_batch}"
            )
        if num_workers < 0:
            raise ValueError(f"data.num_workers must be >= 0, got {num_workers}")
        if train_images_per_class is not None and train_images_per_class < shots + queries:
            raise ValueError(
                f"data.train_images_per_class={train_images_per_class} must be >= data.shots + data.queries = "
                f"{shots} + {queries} = {shots + queries}: a training episode draws that many images of a class"
            )
        if train_classes is not None:
            train_classes = _class_count_or_fraction(train_classes, ways)
            # a count as an int, a fraction as a float, whatever type the parser gave: one value, one record
            self.hparams["train_classes"] = vars(self)["_hparams_initial"]["train_classes"] = train_classes
        self.train_classes = train_classes
        self.dataset_name, self.root, self.seed = dataset, root, seed
        self.train_seed = seed if train_seed is None else train_seed
        self.train_images_per_class = train_images_per_class
        self.ways, self.shots, self.queries = ways, shots, queries
        self.eval_ways = eval_ways or ways
        self.eval_shots = eval_shots or shots
        self.eval_queries = eval_queries or queries
        self.episodes_per_batch = episodes_per_batch
        self.eval_episodes_per_batch = eval_episodes_per_batch or episodes_per_batch
        self.train_episodes_per_epoch = train_episodes_per_epoch
        self.val_episodes, self.test_episodes, self.test_split = val_episodes, test_episodes, test_split
        self.image_size, self.channels = image_size, channels
        self.augment, self.device_cache, self.num_workers = augment, device_cache, num_workers
        self.download = download
        self.data: ImageDataset | None = None
        self.assembler: EpisodeAssembler | None = None
        self.samplers: dict[str, EpisodeSampler] = {}

    # -- set-up ---------------------------------------------------------------------------------------------
    def _load(self) -> ImageDataset:
        options: dict[str, Any] = {"download": True} if self.download else {}
        return load_dataset(self.dataset_name, self.root, self.image_size, self.channels, **options)

    @override
    def prepare_data(self) -> None:
        # generate/convert the on-disk cache once (rank 0) before every rank loads it in setup; rank 0
        # keeps what it loaded rather than reading it twice
        self.data = self._load()

    @override
    def setup(self, stage: str | None = None) -> None:
        if self.data is None:
            self.data = self._load()
        if self.assembler is None:
            augment = RandomShiftFlip(self.train_seed) if self.augment else None
            self.assembler = EpisodeAssembler(self.data.images, self.data.mean, self.data.std, augment)
        # evaluation episodes use eval_* sizes; the training sampler uses the training sizes
        sizes = {"train": (self.ways, self.shots, self.queries, "")}
        eval_sizes = (self.eval_ways, self.eval_shots, self.eval_queries, "eval_")
        sizes.update({"validation": eval_sizes, "test": eval_sizes})
        for split, (ways, shots, queries, prefix) in sizes.items():
            split_name = self.test_split if split == "test" else split
            classes = self.data.splits[split_name]
            if split == "train":
                classes = self._kept_training_classes(classes)
            try:
                # the training sampler lists the rows every training episode is drawn from (the loaders, resampling's
                # candidates, offline scoring): a scarce split applied here reaches them all, for every dataset
                rows = self._training_rows(self.data.labels, classes) if split == "train" else None
                self.samplers[split] = EpisodeSampler(self.data.labels, classes, ways, shots, queries, prefix, rows)
            except ValueError as error:
                counts = torch.bincount(self.data.labels, minlength=self.data.num_classes)[classes]
                smallest = f"{self.data.class_names[classes[int(counts.argmin())]]!r} with {int(counts.min())} images"
                raise ValueError(
                    f"data.{error} (dataset {self.dataset_name!r}, split {split_name!r}: {len(classes)} classes, "
                    f"the smallest {smallest})"
                ) from None
        self.check_world_size(self.world_size)
        if self.task_sampler is not None:
            train_classes = self.samplers["train"].classes
            #: global class id -> its position in the training split (the task sampler's index), -1 elsewhere
            self._split_positions = _positions(train_classes)
            self.task_sampler.bind(len(train_classes), self.ways, self.episodes_per_batch)
            if self.task_sampler.needs_class_features:
                self._check_images_per_class(self.task_sampler.images_per_class)
            if stage == "fit":
                self._check_feedback()

    def _check_feedback(self) -> None:
        """An adaptive sampler learns only from a callback that feeds it (``feeds_task_sampler``): refuse a fit
        without one rather than train on a sampler that never adapts."""
        assert self.task_sampler is not None
        callbacks = getattr(self.trainer, "callbacks", None) or []
        fed = any(getattr(callback, "feeds_task_sampler", False) for callback in callbacks)
        if self.task_sampler.adaptive and not fed:
            raise ValueError(
                f"data.task_sampler={self.task_sampler!r} learns from the model: add the "
                "lightning_episodes.callbacks.TaskSamplerFeedback callback to trainer.callbacks "
                "(the command line adds it to every run)"
            )

    def _check_images_per_class(self, count: int) -> None:
        """A sampler's ``images_per_class`` must fit in every training class's images (a scarce split's too)."""
        available = int(self.samplers["train"].counts.min())
        if count > available:
            raise ValueError(
                f"data.task_sampler.images_per_class={count} exceeds the {available} training images of the "
                f"smallest training class (dataset {self.dataset_name!r})"
            )

    def class_images(
        self, count: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """``[N, count, C, H, W]``: ``count`` normalised images of each training class, in the order of the training
        split's class list (a task sampler's positions), without augmentation.

        Each class gives the first ``count`` of its images in the fixed order of the data seed
        (:func:`~lightning_episodes.data.keep_per_class`), so they are among a scarce split's training images and
        the same for every run and rank.

        Raises:
            RuntimeError: before :meth:`setup`.
            ValueError: if a training class has fewer than ``count`` training images.
        """
        if self.assembler is None or self.data is None:
            raise RuntimeError("call setup() before asking for class images")
        self._check_images_per_class(count)
        classes = self.samplers["train"].classes
        rows = keep_per_class(self.data.labels, classes.tolist(), count, self.seed, "images_per_class")
        rows = rows[torch.argsort(_positions(classes)[self.data.labels[rows]], stable=True)].view(len(classes), count)
        images = self.assembler.images[rows.to(self.assembler.images.device)].to(device)
        scale, shift = self.assembler.scale.to(device, dtype), self.assembler.shift.to(device, dtype)
        return images.to(dtype).mul_(scale).add_(shift)

    def task_feedback(
        self, step: int, class_ids: torch.Tensor, losses: torch.Tensor, confusion: torch.Tensor | None
    ) -> None:
        """Passes a step's global batch of training outcomes to the task sampler (called identically on every rank).

        Args:
            step: the episodes' global step.
            class_ids: int64 ``[B, ways]`` global class ids of each episode (its identity's ``classes``).
            losses: ``[B]`` each episode's training loss.
            confusion: ``[B, ways, ways]`` each episode's soft confusion (see
                :class:`~lightning_episodes.data.TaskFeedback`), or ``None``.
        """
        if self.task_sampler is None:
            return
        positions = self._split_positions[class_ids.to("cpu", torch.long)]
        host = None if confusion is None else confusion.detach().to("cpu", torch.float64)
        self.task_sampler.update(TaskFeedback(step, positions, losses.detach().to("cpu", torch.float64), host))

    @override
    def state_dict(self) -> dict[str, Any]:
        return {} if self.task_sampler is None else {"task_sampler": self.task_sampler.state_dict()}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.task_sampler is not None:
            self.task_sampler.load_state_dict(state_dict.get("task_sampler", {}))

    def _kept_training_classes(self, classes: list[int]) -> list[int]:
        """The training split's classes that training keeps: all, or ``train_classes`` of them
        (:func:`~lightning_episodes.data.keep_classes`).

        Raises:
            ValueError: if ``train_classes`` asks for more classes than the split has or keeps fewer than ``ways``.
        """
        total = len(classes)
        if self.train_classes is None or self.ways > total:  # too many ways: the sampler says so
            return classes
        value = self.train_classes
        count = value if isinstance(value, int) else math.floor(Fraction(repr(value)) * total)  # exact: 0.3 * 10 = 3
        allowed = f"allowed are a count in {self.ways}..{total} or a fraction in [{self.ways}/{total}, 1]"
        where = f"the {total} classes of the training split (dataset {self.dataset_name!r})"
        if count > total:
            raise ValueError(f"data.train_classes={value!r} exceeds {where}: {allowed}")
        if count < self.ways:
            raise ValueError(
                f"data.train_classes={value!r} keeps {count} of {where}, fewer than data.ways = {self.ways}: {allowed}"
            )
        return keep_classes(classes, count)

    def _training_rows(self, labels: torch.Tensor, classes: Sequence[int]) -> torch.Tensor | None:
        """The dataset rows that training episodes draw from: all (``None``), or ``train_images_per_class`` of each
        class, chosen by the data seed alone (not ``train_seed``: every run of one data seed trains on those images)."""
        if self.train_images_per_class is None:
            return None
        return keep_per_class(labels, classes, self.train_images_per_class, self.seed, "train_images_per_class")

    def check_world_size(self, world_size: int) -> None:
        """Check that ``world_size`` processes (devices x nodes) can share a training batch and the fixed episodes.

        Raises:
            ValueError: if ``episodes_per_batch`` is not divisible by ``world_size``, or ``val_episodes`` or
                ``test_episodes`` is smaller (a device without an episode to evaluate would wait for the others'
                results alone).
        """
        if self.episodes_per_batch % world_size:
            raise ValueError(
                f"data.episodes_per_batch={self.episodes_per_batch} must be divisible by the number of "
                f"devices ({world_size}): it is the global batch and every device takes an equal slice"
            )
        for name in ("val_episodes", "test_episodes"):
            if getattr(self, name) < world_size:
                raise ValueError(
                    f"data.{name}={getattr(self, name)} must be >= the number of devices ({world_size}): every "
                    "device evaluates its share of the fixed episodes"
                )

    @property
    def world_size(self) -> int:
        return self.trainer.world_size if self.trainer is not None else 1

    @property
    def rank(self) -> int:
        return self.trainer.global_rank if self.trainer is not None else 0

    # -- loaders --------------------------------------------------------------------------------------------
    def _loader(self, dataset: TrainingEpisodes | EvaluationEpisodes) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=None,
            num_workers=self.num_workers,
            pin_memory=not self.device_cache and self._on_cuda(),
            persistent_workers=False,
        )

    def _on_cuda(self) -> bool:
        return self.trainer is not None and self.trainer.strategy.root_device.type == "cuda"

    def _cpu_assembler(self) -> EpisodeAssembler | None:
        # with a device cache, batches travel as indices and are assembled in on_after_batch_transfer
        return None if self.device_cache else self.assembler

    def _training_assembler(self) -> EpisodeAssembler | None:
        # a task sampler chooses the classes when the batch reaches the model: the loader yields bare identities
        return None if self.task_sampler is not None else self._cpu_assembler()

    @override
    def train_dataloader(self) -> DataLoader:
        start = self.trainer.global_step if self.trainer is not None else 0
        steps_per_epoch = None
        if self.train_episodes_per_epoch is not None:
            steps_per_epoch = self.train_episodes_per_epoch // self.episodes_per_batch
            # each epoch's loader must start at the then-current global step
            if self.trainer is not None:
                self.trainer.reload_dataloaders_every_n_epochs = 1  # type: ignore[attr-defined]
        stream = TrainingEpisodes(
            self.samplers["train"],
            self.train_seed,
            self.episodes_per_batch,
            self.rank,
            self.world_size,
            start,
            steps_per_epoch,
            self._training_assembler(),
        )
        return self._loader(stream)

    def training_identities(self, step: int, episodes: Sequence[int]) -> EpisodeIdentity:
        """Identities of the training episodes at positions ``episodes`` of global step ``step``: the training
        stream's pure function of ``(train_seed, step, j)`` (and of the task sampler's state, with one), also for
        positions past ``episodes_per_batch`` (more episodes of the same step, e.g. the candidates that resampling
        chooses from); ids ``step * B + j``."""
        sampler = self.task_sampler
        classes = None if sampler is None else sampler.classes(self.train_seed, step, list(episodes))
        return self.samplers["train"].sample(
            self.train_seed, "train", step, episodes, first_id=step * self.episodes_per_batch, classes=classes
        )

    def training_episodes(
        self, step: int, episodes: Sequence[int], device: torch.device, dtype: torch.dtype = torch.float32
    ) -> Episode:
        """Training episodes at positions ``episodes`` of global step ``step``, assembled as the training loader's
        batches are: gathered where the loader gathers (on ``device`` with ``device_cache``, else on the CPU),
        then normalised (and augmented, with ``augment``) on ``device`` in ``dtype``, and mixed with
        ``task_interpolation``.

        Positions past ``episodes_per_batch`` are more episodes of the same step (:meth:`training_identities`):
        ``mode="resample"`` of the weighting callback draws its candidates here (with ``task_interpolation``, each
        block of ``episodes_per_batch`` positions pairs within itself:
        :func:`~lightning_episodes.data.partner_position`).

        Raises:
            RuntimeError: before :meth:`setup`.
        """
        episode = self._unmixed_training_episodes(step, episodes, device, dtype)
        return self._interpolate(episode, step, list(episodes)) if self.task_interpolation is not None else episode

    def _unmixed_training_episodes(
        self, step: int, episodes: Sequence[int], device: torch.device, dtype: torch.dtype
    ) -> Episode:
        if self.assembler is None:
            raise RuntimeError("call setup() before assembling episodes")
        identity = self.training_identities(step, episodes)
        batch = identity if self.device_cache else self.assembler.gather(identity)
        return self.assemble(move_data_to_device(batch, device), self.augment, dtype)

    def _interpolate(self, batch: Episode, step: int, positions: list[int]) -> Episode:
        """``batch`` (the normalised training episodes at ``positions`` of ``step``) mixed by the task interpolation.

        A partner outside ``batch`` (the next rank's first episode under DDP, or a resampled share's) is rebuilt from
        its identity as the training loader builds it, on the batch's device and in its dtype (and augmented, with
        ``augment``): the same tensors its own rank holds. Mixing after normalisation (and augmentation) keeps each
        part of a mixed image exactly the source episode's pixels; CutMix copies pixels, so it would commute with the
        per-channel normalisation, but not with the augmentation, which shifts each episode's images by its own id.
        """
        assert self.task_interpolation is not None
        ways, (height, width) = batch.ways, batch.support.shape[-2:]
        plan = self.task_interpolation.plan(
            self.train_seed, step, positions, self.episodes_per_batch, ways, height, width
        )
        if not bool(plan.mixed.any()):
            return batch
        held = {position: i for i, position in enumerate(positions)}
        partners = plan.partners.tolist()
        missing = sorted({p for p, mixed in zip(partners, plan.mixed.tolist(), strict=True) if mixed and p not in held})
        support, query = batch.support, batch.query
        if missing:
            fetched = self._unmixed_training_episodes(step, missing, support.device, support.dtype)
            support, query = torch.cat([support, fetched.support]), torch.cat([query, fetched.query])
            held.update({position: len(positions) + i for i, position in enumerate(missing)})
        index = torch.tensor([held[p] for p in partners], device=support.device)
        partner = Episode(support[index], batch.support_labels, query[index], batch.query_labels, batch.identity)
        return self.task_interpolation.mix(batch, partner, plan)

    def evaluation_episodes(self, stream: Literal["validation", "test"], count: int) -> EvaluationEpisodes:
        """The fixed ``stream`` set of ``count`` episodes, sliced for this rank."""
        return EvaluationEpisodes(
            self.samplers[stream],
            self.seed,
            stream,
            count,
            self.eval_episodes_per_batch,
            self.rank,
            self.world_size,
            self._cpu_assembler(),
        )

    @override
    def val_dataloader(self) -> DataLoader:
        return self._evaluation_loader(self.evaluation_episodes("validation", self.val_episodes))

    @override
    def test_dataloader(self) -> DataLoader:
        return self._evaluation_loader(self.evaluation_episodes("test", self.test_episodes))

    def _evaluation_loader(self, episodes: EvaluationEpisodes) -> DataLoader:
        """The loader of a fixed set: its length is the rank's number of batches, so Lightning's progress bars show
        their totals. Lightning warns that an ``IterableDataset``'s length "could be inaccurate" with several
        dataloader workers; this one's is exact (the workers split the rank's batches, never repeat one): that
        warning is silenced, by its message alone."""
        warnings.filterwarnings("ignore", message=_LENGTH_WARNING, category=UserWarning)
        return self._loader(episodes)

    @override
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        # a task sampler's choice is made here, at the step, with the state the previous steps left (the loader
        # runs a batch ahead): the loader's bare identities give the step and positions
        trainer = self.trainer
        if (
            self.task_sampler is None
            or trainer is None
            or not trainer.training
            or not isinstance(batch, EpisodeIdentity)
        ):
            return batch
        ids = batch.episode_ids.tolist()
        step = ids[0] // self.episodes_per_batch
        identity = self.training_identities(step, [i - step * self.episodes_per_batch for i in ids])
        if self.device_cache:
            return identity
        assert self.assembler is not None  # setup ran
        return self.assembler.gather(identity)

    @override
    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        # batches arrive as uint8 images or as bare identities; both become float episodes on the device
        if not isinstance(batch, EpisodeIdentity | Episode):
            return batch
        training, dtype = False, torch.float32
        if self.trainer is not None:
            training = self.trainer.training
            # the model's parameter dtype: float64 under precision="64-true", bf16 under "bf16-true"
            module_dtype = self.trainer.lightning_module.dtype
            if isinstance(module_dtype, torch.dtype):
                dtype = module_dtype
        episode = self.assemble(batch, augment=self.augment and training, dtype=dtype)
        if not training or self.task_interpolation is None:
            return episode
        # a training batch holds episodes j of one global step, ids step * B + j (j < B)
        ids = episode.identity.episode_ids.tolist()
        step = ids[0] // self.episodes_per_batch
        return self._interpolate(episode, step, [i - step * self.episodes_per_batch for i in ids])

    def assemble(
        self, batch: EpisodeIdentity | Episode, augment: bool = False, dtype: torch.dtype = torch.float32
    ) -> Episode:
        """Normalised float episodes from identities or uint8 episodes, on the device of ``batch``.

        This is also how an episode is rebuilt from its identity alone, e.g. to re-score it later.
        """
        if self.assembler is None:
            raise RuntimeError("call setup() before assembling episodes")
        if isinstance(batch, EpisodeIdentity):
            device = batch.classes.device
            if self.assembler.images.device != device:
                self.assembler.to(device)  # device_cache: the uint8 store moves to the accelerator once
            batch = self.assembler.gather(batch)
        return self.assembler.normalize(batch, augment=augment, dtype=dtype)


def _class_count_or_fraction(value: object, ways: int) -> int | float:
    """``train_classes`` as a fraction in ``(0, 1]`` (a ``float``) or a count >= ``ways`` (an ``int``).

    The value decides, not its type (a command line may parse ``12`` as ``12.0``).

    Raises:
        ValueError: for anything else (naming ``data.train_classes``, its value and the allowed range).
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        if 0 < value <= 1:
            return float(value)
        if value >= ways and float(value).is_integer():
            return int(value)
    shown = int(value) if isinstance(value, float) and value.is_integer() else value  # 3, not the parser's 3.0
    raise ValueError(
        f"data.train_classes={shown!r} must be a fraction of the training classes in (0, 1] or a whole number of them "
        f">= data.ways = {ways}"
    )


def _positions(classes: torch.Tensor) -> torch.Tensor:
    """Global class id -> its position in ``classes`` (-1 for the ids not in it)."""
    positions = torch.full((int(classes.max()) + 1,), -1, dtype=torch.long)
    positions[classes] = torch.arange(len(classes))
    return positions
