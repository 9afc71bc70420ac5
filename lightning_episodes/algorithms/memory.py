"""How much memory a batch of episodes takes, found by a dry run of the model on the ``meta`` device.

A ``meta`` tensor has a shape and a dtype but no data: the algorithm runs its real code (the backbone's activations,
ProtoNet's pairwise differences ``[B, Q, ways, D]``, MAML's inner loop, the backward pass in training) in
milliseconds, and :class:`PeakMemory` adds up the storages alive after each operation. The dry run takes the path of
the device it stands for (:func:`~lightning_episodes.models.devices.meta_stands_for`: on a CPU, evaluation embeds one
episode at a time), so its peak is the one a process reaches: within 10% of the measured peak RSS of a conv4 ProtoNet
step (``tests/algorithms/test_memory.py``). (Fake tensors, ``torch._subclasses.FakeTensorMode``, would do the same, but
once a process has made one, its next backward pass starts autograd's device threads, after which no process forked
from it can use autograd: Lightning's ``ddp_fork``, a test that forks its ranks.)

Example::

    >>> from lightning_episodes.algorithms import ProtoNet
    >>> model = ProtoNet(backbone="conv4", backbone_options={"hidden": 32}, in_channels=1, image_size=28)
    >>> shape = BatchShape(episodes=4, ways=500, shots=5, queries=15, channels=1, image_size=28)
    >>> round(episode_batch_bytes(model, shape, training=True) / 2**30)  # GiB: a training step of ways 500
    21
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from lightning_episodes.algorithms.base import EpisodicModule
from lightning_episodes.data.episode import Episode
from lightning_episodes.models.devices import meta_stands_for

#: Lightning's ``trainer.precision`` values whose model (and so batch) is in another dtype than float32.
_TRUE_DTYPES = {"64-true": torch.float64, "bf16-true": torch.bfloat16, "16-true": torch.float16}
#: Mixed precisions, and the true precision of their lower dtype: ``torch.autocast`` keeps the weights in float32 and
#: runs an operation in the lower dtype where its lists say so, so a batch takes at least what it takes in that true
#: precision and at most what it takes in float32 (a conv4 ProtoNet or MAML step on a CPU: 0.56-0.59 of float32).
MIXED_LOWER = {"bf16-mixed": "bf16-true", "16-mixed": "16-true"}


@dataclass(frozen=True)
class BatchShape:
    """The sizes of a batch of episodes, as the data module assembles it.

    Args:
        episodes: episodes in the batch (on one device).
        ways: classes per episode.
        shots: support images per class.
        queries: query images per class.
        channels: image channels.
        image_size: image height and width in pixels.
    """

    episodes: int
    ways: int
    shots: int
    queries: int
    channels: int
    image_size: int

    @property
    def images(self) -> int:
        """Images in the batch: ``episodes x ways x (shots + queries)``."""
        return self.episodes * self.ways * (self.shots + self.queries)


class PeakMemory(TorchDispatchMode):
    """Records the largest total size of the storages that operations run under it created and that are still alive
    (a view shares its base's storage: counted once; a storage freed by Python or autograd stops counting)."""

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        #: the peak, in bytes
        self.peak = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, Tensor):
                storage = tensor.untyped_storage()
                ref = StorageWeakRef(storage)
                self._live.setdefault(ref.cdata, (ref, storage.nbytes()))
        self._live = {key: entry for key, entry in self._live.items() if not entry[0].expired()}
        self.peak = max(self.peak, sum(size for _, size in self._live.values()))
        return out


def _meta_model(model: EpisodicModule, dtype: torch.dtype) -> Any:
    """A copy of ``model`` whose parameters and buffers are ``meta`` tensors in ``dtype`` (floating ones): the weights
    themselves are never copied."""
    memo: dict[int, Any] = {}
    trainer = getattr(model, "_trainer", None)
    if trainer is not None:
        memo[id(trainer)] = None  # a model attached to a Trainer: the copy is not
    for tensor in [*model.parameters(), *model.buffers()]:
        meta = torch.empty_like(tensor, device="meta", dtype=dtype if tensor.is_floating_point() else tensor.dtype)
        is_parameter = isinstance(tensor, nn.Parameter)
        memo[id(tensor)] = nn.Parameter(meta, requires_grad=tensor.requires_grad) if is_parameter else meta
    return copy.deepcopy(model, memo)


def episode_batch_bytes(
    model: EpisodicModule,
    shape: BatchShape,
    training: bool,
    device: torch.device | str = "cpu",
    precision: str = "32-true",
) -> int:
    """The memory, in bytes, that one batch of episodes takes on ``device``: its uint8 images as the data module
    gathers them, their normalised copy, and at the peak of the model's step everything alive (in training the
    activations kept for the backward pass and the gradients; in evaluation the largest transient activations).

    The weights, the optimiser's state, the dataset and the process itself are not counted. A dry run on ``meta``
    tensors cannot autocast: a mixed precision (``bf16-mixed``, ``16-mixed``) is counted in float32, an upper bound;
    :data:`MIXED_LOWER` names the precision that gives its lower bound.

    Args:
        model: the algorithm, with its backbone; it is neither run nor changed.
        shape: the batch's sizes.
        training: a training step (forward and backward) or an evaluation step (forward, without gradients unless the
            algorithm adapts at evaluation).
        device: where the step runs (``cpu``: the backbone embeds evaluation episodes one at a time, as it does there).
        precision: Lightning's ``trainer.precision`` (``32-true``, ``64-true``, ``bf16-true``, ...).

    Raises:
        RuntimeError: if the algorithm cannot run on meta tensors (a step that reads values: ``.item()``, a
            data-dependent shape).
    """
    dtype = _TRUE_DTYPES.get(precision, torch.float32)
    device = torch.device(device)
    autograd = training or type(model).requires_grad_in_evaluation

    meta = _meta_model(model, dtype)
    meta.train(training)
    side = (shape.channels, shape.image_size, shape.image_size)
    peak = PeakMemory()
    try:
        with meta_stands_for(device.type), peak, torch.enable_grad() if autograd else torch.no_grad():
            support = torch.empty(shape.episodes, shape.ways * shape.shots, *side, device="meta", dtype=dtype)
            query = torch.empty(shape.episodes, shape.ways * shape.queries, *side, device="meta", dtype=dtype)
            out = meta._output(Episode.from_tensors(support, query, shape.ways))
            if training and out.losses.requires_grad:
                out.losses.sum().backward()
            del out
    except Exception as error:  # the algorithm's own code: whatever it cannot do without values
        raise RuntimeError(f"{type(model).__name__} cannot run on meta tensors: {error}") from error
    gathered = shape.images * shape.channels * shape.image_size**2  # the uint8 images before normalisation
    return peak.peak + gathered


def available_memory(device: torch.device | str = "cpu") -> int | None:
    """The memory, in bytes, that a new allocation on ``device`` can take: CUDA's free memory
    (``torch.cuda.mem_get_info``), or on a CPU the kernel's ``MemAvailable`` (``/proc/meminfo``); ``None`` where it
    cannot tell (another accelerator, or a system without ``/proc/meminfo``)."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    return None
