"""The speed settings of :class:`~lightning_episodes.algorithms.base.EpisodicModule`, applied when a Trainer sets the
model up (its ``configure_model`` hook): ``channels_last`` (the convolutions' memory layout) and ``compile_backbone``
(``torch.compile``); ``cuda_graphs`` is checked there too, and replayed by :mod:`~lightning_episodes.algorithms.graphs`.

Each gives the same numbers up to float rounding; what they gain, and on which machine, is in docs/benchmarks.md.
"""

from __future__ import annotations

import torch
from torch import nn

from lightning_episodes.models import EpisodicBackbone

__all__ = ["configure_speed", "use_channels_last"]


def configure_speed(module: nn.Module, channels_last: bool, compile_backbone: bool) -> None:
    """Apply the speed settings to ``module``; what ``EpisodicModule.configure_model`` does, which the Trainer calls
    before it wraps the model (DDP) and builds the optimiser, in every stage.

    Args:
        module: the model.
        channels_last: convert it with :func:`use_channels_last`.
        compile_backbone: compile its ``backbone`` submodule in place with ``torch.compile`` (once).

    Raises:
        ValueError: (one line naming the option) on ``compile_backbone`` for a module without a ``backbone``.
    """
    if channels_last:
        use_channels_last(module)
    if compile_backbone:
        backbone = getattr(module, "backbone", None)
        if not isinstance(backbone, nn.Module):
            raise ValueError(f"model.compile_backbone=true needs a `backbone` module; {type(module).__name__} has none")
        if getattr(backbone, "_compiled_call_impl", None) is None:  # once: compiling again would start over
            # in place (not a torch.compile wrapper): parameter names and checkpoints stay the same
            backbone.compile()


def use_channels_last(module: nn.Module) -> None:
    """Convert every 4-d weight of ``module`` (the convolutions) to ``channels_last`` and make each
    :class:`~lightning_episodes.models.EpisodicBackbone` in it convert its images too, so that every convolution,
    batch norm and pooling runs in that layout (MAML's fast weights inherit it). Idempotent. A backbone of another
    type gets channels_last weights only (PyTorch's convolutions then convert their input themselves).
    """
    module.to(memory_format=torch.channels_last)
    for child in module.modules():
        if isinstance(child, EpisodicBackbone):
            child.channels_last = True
