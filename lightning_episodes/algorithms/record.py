"""What a checkpoint of an :class:`~lightning_episodes.algorithms.base.EpisodicModule` carries besides its weights
and hyper-parameters, so that a later run needs no configuration: its concrete class and the data it was trained on
(the ``lightning_episodes`` record, which :func:`~lightning_episodes.algorithms.loading.checkpoint_info` reads; an
offline reference must match the number of ways, reports name the training dataset), the input normalisation that
prediction applies, and whether the pre-trained backbone weights were loaded."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning_episodes._lightning import record_hyperparameter

if TYPE_CHECKING:
    from lightning_episodes.algorithms.base import EpisodicModule

__all__ = ["load_record", "save_record"]


def save_record(module: EpisodicModule, checkpoint: dict[str, Any]) -> None:
    """Write ``module``'s record into ``checkpoint`` (its ``on_save_checkpoint``)."""
    cls = type(module)
    info: dict[str, Any] = {"class_path": f"{cls.__module__}.{cls.__qualname__}", **(module.trained_on or {})}
    datamodule = getattr(module.trainer, "datamodule", None) if module._trainer is not None else None
    if datamodule is not None and module.trainer.state.fn == "fit":
        for key in ("dataset", "ways", "shots", "queries"):
            value = getattr(datamodule, key if key != "dataset" else "dataset_name", None)
            if isinstance(value, int | str):
                info[key] = value
    checkpoint["lightning_episodes"] = info
    if module.input_normalization is not None:
        checkpoint["input_normalization"] = module.input_normalization
    if module.backbone_weights is not None:  # a later fit must not load the pre-trained weights again
        checkpoint["backbone_weights_loaded"] = module.backbone_weights_loaded


def load_record(module: EpisodicModule, checkpoint: dict[str, Any]) -> None:
    """Restore ``module``'s record from ``checkpoint`` (its ``on_load_checkpoint``)."""
    info = checkpoint.get("lightning_episodes") or {}
    module.trained_on = {k: v for k, v in info.items() if k != "class_path"} or None
    module.input_normalization = checkpoint.get("input_normalization")
    module.backbone_weights_loaded = bool(checkpoint.get("backbone_weights_loaded", False))
    saved = (checkpoint.get(module.CHECKPOINT_HYPER_PARAMS_KEY) or {}).get("backbone")
    if isinstance(saved, dict):  # a class path: keep its record, not the object that was rebuilt from it
        record_hyperparameter(module, "backbone", saved)
