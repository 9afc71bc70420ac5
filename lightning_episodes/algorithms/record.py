"""What a checkpoint of an :class:`~lightning_episodes.algorithms.base.EpisodicModule` carries besides its weights
and hyper-parameters, so that a later run needs no configuration: its concrete class and the data it was trained on
(the ``lightning_episodes`` record, which :func:`~lightning_episodes.algorithms.loading.checkpoint_info` reads; an
offline reference must match the number of ways, reports name the training dataset), the input normalisation that
prediction applies, and whether the pre-trained backbone weights were loaded."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["RecordedModel", "load_record", "save_record"]


class RecordedModel(Protocol):
    """What the record reads and restores of a model (``EpisodicModule``'s attributes of these names)."""

    #: dataset and episode shape of the training run the model comes from
    trained_on: dict[str, Any] | None
    #: per-channel ``{"mean": [...], "std": [...]}`` of the training images' normalisation
    input_normalization: dict[str, list[float]] | None
    #: the file of pre-trained backbone weights, if any
    backbone_weights: str | None
    #: whether they were loaded (a later fit must not load them again)
    backbone_weights_loaded: bool


def save_record(model: RecordedModel, checkpoint: dict[str, Any], fitting_datamodule: object | None) -> None:
    """Write ``model``'s record into ``checkpoint`` (its ``on_save_checkpoint``).

    Args:
        model: the model saved; its class path is recorded.
        checkpoint: the checkpoint's dictionary, written in place.
        fitting_datamodule: the data module of the fit in progress (``None`` outside ``fit``): its ``dataset_name``,
            ``ways``, ``shots`` and ``queries`` are recorded over ``trained_on``'s.
    """
    cls = type(model)
    info: dict[str, Any] = {"class_path": f"{cls.__module__}.{cls.__qualname__}", **(model.trained_on or {})}
    if fitting_datamodule is not None:
        for key in ("dataset", "ways", "shots", "queries"):
            value = getattr(fitting_datamodule, key if key != "dataset" else "dataset_name", None)
            if isinstance(value, int | str):
                info[key] = value
    checkpoint["lightning_episodes"] = info
    if model.input_normalization is not None:
        checkpoint["input_normalization"] = model.input_normalization
    if model.backbone_weights is not None:  # a later fit must not load the pre-trained weights again
        checkpoint["backbone_weights_loaded"] = model.backbone_weights_loaded


def load_record(model: RecordedModel, checkpoint: dict[str, Any]) -> None:
    """Restore ``model``'s record from ``checkpoint`` (its ``on_load_checkpoint``)."""
    info = checkpoint.get("lightning_episodes") or {}
    model.trained_on = {k: v for k, v in info.items() if k != "class_path"} or None
    model.input_normalization = checkpoint.get("input_normalization")
    model.backbone_weights_loaded = bool(checkpoint.get("backbone_weights_loaded", False))
