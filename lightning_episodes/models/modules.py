"""Any ``nn.Module`` as a backbone: a class path built safely, an adapter to episodes, and pre-trained weights.

A backbone of this library maps a batch of episodes' images ``[B, N, C, H, W]`` to features ``[B, N, D]``. A module
written for image classification (a torchvision ResNet, your own network) maps ``[M, C, H, W]`` to ``[M, K]``
instead: :class:`EpisodeAdapter` runs it on the episodes' images, and :func:`drop_head` replaces its classification
head by ``nn.Identity`` so that it returns its features (a torchvision ResNet-18: 512 instead of 1,000 logits).
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from lightning_episodes.models.base import EpisodicBackbone
from lightning_episodes.models.registry import available_backbones, build_backbone

__all__ = [
    "OBJECT_RECORD",
    "EpisodeAdapter",
    "build_episodic_backbone",
    "build_module",
    "drop_head",
    "load_backbone_weights",
    "module_class",
]

#: the key of the record of a backbone passed to a model as an object in Python (its arguments are unknown)
OBJECT_RECORD = "passed_as_object"


def module_class(class_path: str) -> type[nn.Module]:
    """The class that ``class_path`` (``package.module.Class``) names, if it is an ``nn.Module`` subclass.

    Only a class is accepted, never a function or another callable (``torchvision.models.resnet18`` is refused:
    ``torchvision.models.ResNet`` is its class). Importing the module runs its code: check where the class path comes
    from first (:func:`~lightning_episodes.algorithms.loading.check_class_path` does for a checkpoint).

    Raises:
        ValueError: naming the class path, if it cannot be imported, is not a class or not an ``nn.Module``.
    """
    module_name, _, name = str(class_path).rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), name) if module_name else None
    except (ImportError, AttributeError) as error:
        raise ValueError(f"cannot import {class_path!r}: {error}") from None
    if not isinstance(found, type):
        kind = "a function" if callable(found) else type(found).__name__
        raise ValueError(f"{class_path!r} is {kind}, not a class: a backbone is an nn.Module class")
    if not issubclass(found, nn.Module):
        raise ValueError(f"{class_path!r} is not an nn.Module subclass")
    return found


def build_module(spec: Mapping[str, Any]) -> tuple[nn.Module, dict[str, Any]]:
    """Build ``{"class_path": ..., "init_args": {...}}`` as LightningCLI would, and the spec as a config records it.

    The class is checked first (:func:`module_class`); its ``init_args`` are parsed against its signature by
    jsonargparse (a class-typed argument given as a class path, ``torchvision.models.resnet.BasicBlock``, is imported
    and checked against its annotation). The returned record holds names and plain values only (no class objects),
    so a checkpoint loads it with ``weights_only=True``.

    Raises:
        ValueError: if the spec has other keys, the class is refused, or its arguments do not parse.
    """
    from jsonargparse import ArgumentParser  # a second to import: only where a class path is built

    unknown = set(spec) - {"class_path", "init_args"}
    if "class_path" not in spec or unknown:
        raise ValueError(f"expected {{'class_path': ..., 'init_args': {{...}}}}, got the keys {sorted(spec)}")
    module_class(spec["class_path"])
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(nn.Module, "backbone", fail_untyped=False)
    try:
        config = parser.parse_object({"backbone": dict(spec)})
    except (argparse.ArgumentError, TypeError, ValueError) as error:
        # jsonargparse lists what each type of the union said: the class's complaint is the line after its name
        lines = [line.strip(" -") for line in str(error).splitlines()]
        at = next((i + 1 for i, line in enumerate(lines[:-1]) if line.startswith("Problem with given class_path")), 0)
        raise ValueError(f"{spec['class_path']}: {lines[at]}") from None
    module = parser.instantiate(config).backbone
    return module, json.loads(parser.dump(config, format="json", skip_unset=False))["backbone"]


def drop_head(module: nn.Module, name: str) -> nn.Module:
    """Replace the submodule ``name`` of ``module`` (``fc``, ``classifier``, ``heads.head``) by ``nn.Identity``.

    Raises:
        ValueError: naming ``model.drop_head``, if ``module`` has no such submodule.
    """
    parent_name, _, attribute = name.rpartition(".")
    try:
        parent = module.get_submodule(parent_name)
        parent.get_submodule(attribute)
    except AttributeError:
        children = ", ".join(child for child, _ in module.named_children())
        raise ValueError(
            f"model.drop_head={name!r}: {type(module).__name__} has no submodule {name!r} (its children: {children})"
        ) from None
    setattr(parent, attribute, nn.Identity())
    return module


class EpisodeAdapter(EpisodicBackbone):
    """A module mapping images ``[M, C, H, W]`` to ``[M, ...]`` as a backbone: ``[B, N, C, H, W]`` -> ``[B, N, D]``.

    Its outputs are flattened to ``D`` features per image. A module with batch norms that use the batch's
    statistics (in training, or without running buffers) embeds each episode on its own, so that an episode's
    features never depend on its batch-mates (docs/method.md, "Batch norm during training"), as this library's
    :class:`~lightning_episodes.models.EpisodicBatchNorm2d` does inside one forward.

    Args:
        module: the wrapped module, its parameters under ``module.`` in the state dict.

    Example:
        >>> import torchvision
        >>> backbone = EpisodeAdapter(drop_head(torchvision.models.resnet18(), "fc"))
        >>> backbone(torch.zeros(2, 5, 3, 32, 32)).shape
        torch.Size([2, 5, 512])
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def embed(self, images: Tensor, episodes: int) -> Tensor:
        norms = [m for m in self.module.modules() if isinstance(m, _BatchNorm)]
        if episodes > 1 and any(m.training or m.running_mean is None for m in norms):
            return torch.cat([self.module(chunk).flatten(1) for chunk in images.chunk(episodes)])
        return self.module(images).flatten(1)


def load_backbone_weights(module: nn.Module, path: str | Path, skip: str | None = None) -> None:
    """Load a state dict that ``torch.save(module.state_dict(), path)`` wrote into ``module``, safely
    (``weights_only=True``: tensors and plain values, no code), after checking every key and shape.

    Args:
        module: the module the file was saved from (an :class:`EpisodeAdapter`: the module it wraps).
        path: the file (``model.backbone_weights``).
        skip: a submodule whose weights the file may hold but ``module`` no longer has (the head that
            ``model.drop_head`` dropped).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: in one line naming ``model.backbone_weights``, the file and the first key that is missing, has
            another shape or is not the backbone's; or if the file is not a state dict.
    """
    module = module.module if isinstance(module, EpisodeAdapter) else module
    where = f"model.backbone_weights={str(path)!r}"
    if not Path(path).is_file():
        raise FileNotFoundError(f"{where} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # an unsafe or corrupt file: its first line, not the unpickler's traceback
        raise ValueError(f"{where} cannot be loaded safely: {str(error).strip().splitlines()[0]}") from None
    if not isinstance(state, Mapping) or not all(isinstance(v, Tensor) for v in state.values()):
        raise ValueError(f"{where} is not a state dict (torch.save(module.state_dict(), path) writes one)")
    if skip:
        state = {key: value for key, value in state.items() if not key.startswith(f"{skip}.")}
    expected = module.state_dict()
    for key, tensor in expected.items():
        if key not in state:
            raise ValueError(f"{where} does not fit the backbone: it has no {key!r} (shape {list(tensor.shape)})")
        if state[key].shape != tensor.shape:
            raise ValueError(
                f"{where} does not fit the backbone: {key!r} has shape {list(state[key].shape)} in the file and "
                f"{list(tensor.shape)} in the backbone"
            )
    unexpected = [key for key in state if key not in expected]
    if unexpected:
        raise ValueError(f"{where} does not fit the backbone: the backbone has no {unexpected[0]!r}")
    module.load_state_dict(state)


def build_episodic_backbone(
    backbone: nn.Module | str | Mapping[str, Any],
    in_channels: int,
    image_size: int,
    options: Mapping[str, Any],
    head: str | None = None,
    given_options: Mapping[str, Any] | None = None,
) -> tuple[nn.Module, dict[str, Any] | None]:
    """The backbone that ``EpisodicModule(backbone=...)`` names, and how its hyper-parameters record it.

    Args:
        backbone: a registered name (built with ``options``), ``{"class_path": ..., "init_args": {...}}``
            (:func:`build_module`) or a module; a module that is not an :class:`EpisodicBackbone` is wrapped in an
            :class:`EpisodeAdapter`.
        in_channels: image channels.
        image_size: image side, in pixels.
        options: the registered backbone's options.
        head: a submodule to replace by ``nn.Identity`` (:func:`drop_head`).
        given_options: the user's ``backbone_options``, which only a registered backbone takes.

    Returns:
        The backbone, and the record of a class path (``None`` for a name): names and plain values only; for a module
        passed as an object, its class path and :data:`OBJECT_RECORD` (its arguments are unknown).

    Raises:
        ValueError: naming ``model.backbone``, on an unknown name, a refused class path, a record of a module passed
            as an object or ``given_options`` with a module; naming ``model.drop_head``, on an unknown ``head``.
    """
    try:
        module, record = _build(backbone, in_channels, image_size, options, given_options)
    except ValueError as error:
        raise ValueError(f"model.backbone: {error}") from None
    if head is not None:
        drop_head(module, head)
    return (module if isinstance(module, EpisodicBackbone) else EpisodeAdapter(module)), record


def _build(
    backbone: nn.Module | str | Mapping[str, Any],
    in_channels: int,
    image_size: int,
    options: Mapping[str, Any],
    given_options: Mapping[str, Any] | None,
) -> tuple[nn.Module, dict[str, Any] | None]:
    if isinstance(backbone, str) and ("." not in backbone or backbone in available_backbones()):
        module, record = build_backbone(backbone, in_channels, image_size, **options), None
    elif isinstance(backbone, str):
        raise ValueError(
            f"unknown backbone {backbone!r}: neither a registered one ({', '.join(available_backbones())}) nor an "
            "nn.Module class path with its init_args ({class_path: ..., init_args: {...}})"
        )
    elif given_options:
        raise ValueError("a module takes no model.backbone_options (a registered backbone's): give its init_args")
    elif isinstance(backbone, nn.Module):
        cls = type(backbone)
        module, record = backbone, {"class_path": f"{cls.__module__}.{cls.__qualname__}", OBJECT_RECORD: True}
    elif OBJECT_RECORD in backbone:
        raise ValueError(
            f"this model's {backbone.get('class_path')} backbone was passed as an object, whose arguments were not "
            "saved: pass it again (load_from_checkpoint(path, backbone=...)), or as {'class_path': ..., "
            "'init_args': {...}}, which checkpoints record"
        )
    else:
        module, record = build_module(backbone)
    return module, record
