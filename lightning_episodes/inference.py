"""Prediction on your own images: a trained checkpoint, a support folder of labelled images and a folder of query
images give each query's predicted class and class probabilities (:func:`predict`; from the command line,
``lightning-episodes predict``: :mod:`lightning_episodes.commands.predict`).

Folders::

    SUPPORT/<class name>/<image>   one sub-folder per class, the same number k of images in each (the shots)
    QUERY/<image>                  the images to classify

The images (PNG, JPEG, BMP, GIF, TIFF or WebP; files whose names start with ``.`` are ignored) are converted
as the datasets convert theirs: to the checkpoint's channels (luminance ``L`` or ``RGB``), resized to its image
size with Pillow's antialiased bilinear filter, stored as uint8, then normalised with the training data's mean
and standard deviation (recorded in the checkpoint). The support and all queries form one episode, which the
model evaluates as in testing (:meth:`~lightning_episodes.EpisodicModule.query_logits`, in evaluation mode with
its ``eval_batch_norm``): MAML and ANIL adapt to the support set, FEAT adapts its prototypes. With
``eval_batch_norm="episode"`` (MAML's and ANIL's default) the queries are normalised together, so a query's
probabilities depend on the other queries, exactly as in the model's evaluation.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lightning_episodes.algorithms.base import EpisodicModule
from lightning_episodes.algorithms.loading import load_episodic_module
from lightning_episodes.algorithms.maml import MAML
from lightning_episodes.data.assembly import EpisodeAssembler
from lightning_episodes.data.datasets.cache import image_array
from lightning_episodes.data.datasets.folder import class_files, image_files, open_image, require_folder
from lightning_episodes.data.episode import Episode, EpisodeIdentity, episode_labels
from lightning_episodes.models import set_eval_batch_norm


@dataclass(frozen=True)
class Prediction:
    """One query image's prediction.

    Args:
        query: the image file.
        predicted: the most probable class (a support sub-folder's name).
        probabilities: class name -> probability, in the support classes' (sorted) order; they sum to 1.
    """

    query: Path
    predicted: str
    probabilities: dict[str, float]


def support_classes(support_dir: Path) -> dict[str, list[Path]]:
    """Class name -> its image files, from one sub-folder per class (sorted by name).

    Raises:
        FileNotFoundError: if ``support_dir`` does not exist.
        ValueError: if it holds files beside the class folders, fewer than two classes, an empty class folder, a
            file that is not an image, or classes with different numbers of images.
    """
    require_folder(support_dir, "support folder")
    classes = class_files(support_dir)
    if len(classes) < 2:
        raise ValueError(
            f"{support_dir} holds one class sub-folder ({next(iter(classes))}): predict chooses between at least two"
        )
    shots = {name: len(files) for name, files in classes.items()}
    if len(set(shots.values())) > 1:
        counts = ", ".join(f"{name}: {count}" for name, count in shots.items())
        raise ValueError(f"every support class needs the same number of images (shots); found {counts}")
    return classes


def load_image(path: Path, channels: int, image_size: int) -> np.ndarray:
    """``path`` as a uint8 ``[channels, image_size, image_size]`` array, converted as the datasets' caches are.

    Raises:
        ValueError: naming the file, if Pillow cannot read it.
    """
    return image_array(open_image(path), image_size, channels)


def _input_shape(module: EpisodicModule) -> tuple[int, int]:
    hparams = dict(module.hparams)
    if "in_channels" not in hparams or "image_size" not in hparams:
        raise ValueError(f"{type(module).__name__} records no in_channels/image_size hyper-parameters to predict with")
    return int(hparams["in_channels"]), int(hparams["image_size"])


def _normalization(module: EpisodicModule, checkpoint: Path) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The training images' per-channel mean and std: recorded in the checkpoint, or (older checkpoints) read
    from the dataset its data module was configured with."""
    if module.input_normalization is not None:
        return tuple(module.input_normalization["mean"]), tuple(module.input_normalization["std"])
    from lightning_episodes.evaluation.scoring import checkpoint_datamodule

    try:
        data = checkpoint_datamodule(checkpoint)._load()
    except (ValueError, FileNotFoundError) as error:
        raise ValueError(
            f"{checkpoint} records no input normalisation and its training dataset cannot be loaded to find it: {error}"
        ) from None
    return data.mean, data.std


def predict_tensors(module: EpisodicModule, support: torch.Tensor, ways: int, query: torch.Tensor) -> torch.Tensor:
    """Class probabilities ``[Q, ways]`` of normalised ``query`` images ``[Q, C, H, W]`` given class-major normalised
    ``support`` images ``[ways * shots, C, H, W]``, as the model evaluates an episode.

    The module is put in evaluation mode with its ``eval_batch_norm`` (and left so).
    """
    device = support.device
    identity = EpisodeIdentity(
        classes=torch.arange(ways, device=device)[None],
        support_indices=torch.arange(len(support), device=device).view(1, ways, -1),
        # unlabelled queries: no class to file them under
        query_indices=torch.arange(len(query), device=device).view(1, 1, -1),
        episode_ids=torch.zeros(1, dtype=torch.long, device=device),
    )
    labels = episode_labels(1, ways, len(support) // ways, device)
    unknown = torch.full((1, len(query)), -1, dtype=torch.long, device=device)
    batch = Episode(support[None], labels, query[None], unknown, identity)
    module.eval()
    set_eval_batch_norm(module, module.eval_batch_norm)
    with torch.enable_grad() if module.requires_grad_in_evaluation else torch.no_grad():
        logits = module.query_logits(batch)[0]
    probabilities = logits.detach().double().softmax(-1)
    if not torch.isfinite(probabilities).all():
        raise ValueError("the model gives non-finite class scores: its parameters are damaged (NaN or inf)")
    return probabilities


def predict(
    checkpoint: str | Path,
    support_dir: str | Path,
    query_dir: str | Path,
    device: str | torch.device = "cpu",
    allowed_modules: Sequence[str] = (),
) -> list[Prediction]:
    """Classify the images of ``query_dir`` among the classes of ``support_dir`` with a trained checkpoint.

    Args:
        checkpoint: a checkpoint of any algorithm of this library.
        support_dir: one sub-folder per class (its name is the class name), each with the same number of images.
        query_dir: the images to classify.
        device: where the model runs (``"cpu"``, ``"cuda"``, ...); a checkpoint saved on a GPU loads onto it.
        allowed_modules: modules besides this library's that the checkpoint's model class may come from
            (:func:`~lightning_episodes.algorithms.loading.check_class_path`).

    Returns:
        One :class:`Prediction` per query image, in file-name order.

    Raises:
        FileNotFoundError: if the checkpoint or a folder does not exist.
        ValueError: for a broken checkpoint, a folder that is not laid out as above, a file that is not an image,
            unequal shots, or a support set with another number of classes than a MAML/ANIL head has outputs.
    """
    checkpoint, support_dir, query_dir = Path(checkpoint), Path(support_dir), Path(query_dir)
    module = load_episodic_module(checkpoint, map_location=device, allowed_modules=allowed_modules)
    classes = support_classes(support_dir)
    names = list(classes)
    if isinstance(module, MAML) and len(names) != module.ways:
        raise ValueError(
            f"{type(module).__name__}'s head has {module.ways} outputs (model.ways={module.ways}): the support folder "
            f"{support_dir} must have exactly {module.ways} class sub-folders, it has {len(names)}"
        )
    queries = image_files(query_dir, "query folder")
    channels, image_size = _input_shape(module)
    files = [path for name in names for path in classes[name]] + queries
    images = torch.from_numpy(np.stack([load_image(path, channels, image_size) for path in files]))
    mean, std = _normalization(module, checkpoint)
    # (x / 255 - mean) / std with the data pipeline's own constants and float32 operations
    store = EpisodeAssembler(images, mean, std)
    pixels = images.to(torch.float32).mul_(store.scale).add_(store.shift).to(module.device)
    n_support = len(files) - len(queries)
    probabilities = predict_tensors(module, pixels[:n_support], len(names), pixels[n_support:]).cpu()
    return [
        Prediction(path, names[int(row.argmax())], dict(zip(names, map(float, row), strict=True)))
        for path, row in zip(queries, probabilities, strict=True)
    ]


def write_csv(predictions: Sequence[Prediction], path: str | Path | None) -> None:
    """Write ``query,predicted,p(<class>)...`` rows to ``path`` (``None``: standard output)."""
    classes = list(predictions[0].probabilities) if predictions else []
    handle = sys.stdout if path is None else open(path, "w", newline="", encoding="utf-8")  # noqa: SIM115
    try:
        writer = csv.writer(handle)
        writer.writerow(["query", "predicted", *(f"p({name})" for name in classes)])
        for p in predictions:
            writer.writerow([str(p.query), p.predicted, *(f"{p.probabilities[name]:.6f}" for name in classes)])
    finally:
        if path is not None:
            handle.close()
