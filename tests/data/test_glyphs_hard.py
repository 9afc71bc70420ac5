"""The embedded ``glyphs-hard`` dataset: glyphs' classes and splits, colour, difficulty, the knobs and a fit.

Determinism and the disk cache, shared with ``glyphs``, are tested in ``test_rendered.py``.

Most tests render a few dozen characters; the tests of the full dataset (rendered into the default cache
on first use, about a minute on two cores) are marked slow.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from PIL import Image
from pytorch_lightning.callbacks import Callback

from lightning_episodes import EpisodicDataModule, ProtoNet
from lightning_episodes.data.datasets import ImageDataset, glyphs, glyphs_hard
from lightning_episodes.data.datasets.glyphs_hard import (
    DIFFICULTY,
    build_payload,
    cache_file,
    load_glyphs_hard,
    read_cache,
    to_dataset,
)
from lightning_episodes.data.datasets.glyphs_hard_render import Difficulty
from tests.helpers import tiny_trainer

# Characters of every split: Latin and symbols (train); Braille, box drawing, block elements, dingbats and
# Lao (validation); Greek, Cyrillic, Georgian and Armenian (test).
SAMPLE = "ABgQ0,→∑☺⠿─▌▐✓ພΩΣλЖжФԱաლ"


@pytest.fixture(scope="module")
def sample() -> dict:
    return build_payload(image_size=32, images_per_class=4, seed=0, characters=SAMPLE)


def _nearest_prototype_accuracy(images: np.ndarray, episodes: int = 400, ways: int = 5) -> float:
    """5-way 1-shot accuracy of the nearest neighbour in raw pixels (``images``: ``[classes, n, ...]``)."""
    rng = np.random.default_rng(0)
    flat = images.reshape(images.shape[0], images.shape[1], -1).astype(np.float64)
    correct = total = 0
    for _ in range(episodes):
        classes = rng.choice(len(flat), ways, replace=False)
        picks = np.stack([rng.choice(flat.shape[1], 2, replace=False) for _ in classes])
        support = flat[classes, picks[:, 0]]
        query = flat[classes, picks[:, 1]]
        distances = ((query[:, None] - support[None]) ** 2).sum(-1)
        correct += int((distances.argmin(1) == np.arange(ways)).sum())
        total += ways
    return correct / total


# --- classes, splits, shapes ---------------------------------------------------------------------------------


def test_classes_and_splits_are_glyphs(sample):
    grey = glyphs.build_payload(image_size=28, images_per_class=1, seed=0, characters=SAMPLE)
    assert sample["characters"] == grey["characters"]
    hard, plain = to_dataset(sample, channels=3), glyphs.to_dataset(grey, channels=1)
    assert hard.splits == plain.splits
    assert hard.groups == plain.groups
    assert all(hard.splits[s] for s in ("train", "validation", "test"))
    chars = {split: {hard.class_names[k] for k in classes} for split, classes in hard.splits.items()}
    assert {"A", "→"} <= chars["train"]
    assert {"─", "ພ"} <= chars["validation"]
    assert {"Ω", "Ж", "Ա", "ლ"} <= chars["test"]


def test_images_are_in_colour(sample):
    dataset = to_dataset(sample, channels=3)
    assert (dataset.images[:, 0] != dataset.images[:, 1]).flatten(1).any(dim=1).float().mean() > 0.9


def test_one_channel_is_pillows_luminance(sample):
    rgb, grey = to_dataset(sample, channels=3), to_dataset(sample, channels=1)
    assert grey.image_shape == (1, 32, 32)
    for row in range(0, len(rgb.images), 7):
        pil = Image.fromarray(rgb.images[row].permute(1, 2, 0).numpy()).convert("L")
        assert np.array_equal(grey.images[row, 0].numpy(), np.asarray(pil))


def test_statistics_are_each_channels_over_the_training_split(sample):
    for channels in (1, 3):
        dataset = to_dataset(sample, channels)
        train = dataset.images[torch.isin(dataset.labels, torch.tensor(dataset.splits["train"]))]
        pixels = train.numpy().astype(np.float64) / 255.0
        assert dataset.mean == pytest.approx(pixels.mean(axis=(0, 2, 3)).tolist(), abs=1e-9)
        assert dataset.std == pytest.approx(pixels.std(axis=(0, 2, 3)).tolist(), abs=1e-9)


def test_harder_than_glyphs_in_pixel_space():
    """Raw-pixel nearest neighbour tells glyphs' classes apart far better than glyphs-hard's."""
    chars = "ΩΣλΔΘЖФЯБДԱԲԳლშ"
    hard = build_payload(image_size=28, images_per_class=10, seed=0, characters=chars)["images"].numpy()
    plain = glyphs.build_payload(image_size=28, images_per_class=10, seed=0, characters=chars)["images"].numpy()
    easy_accuracy, hard_accuracy = _nearest_prototype_accuracy(plain), _nearest_prototype_accuracy(hard)
    # measured: glyphs 0.41, glyphs-hard 0.22 (chance is 0.2)
    assert hard_accuracy < 0.3
    assert easy_accuracy > hard_accuracy + 0.1


# --- the knobs ---------------------------------------------------------------------------------------------


def test_the_knobs_change_the_images_and_the_cache_file(tmp_path):
    calm = Difficulty(rotation=0.0, shear=0.0, shift=0.0, strokes=0, clutter=0, occluder_probability=0.0)
    calm_images = build_payload(32, 3, 0, characters="AB", knobs=calm)["images"]
    assert not torch.equal(calm_images, build_payload(32, 3, 0, characters="AB")["images"])
    assert cache_file(tmp_path, 32, 20, 0, calm) != cache_file(tmp_path, 32, 20, 0, DIFFICULTY)


# --- training ------------------------------------------------------------------------------------------------


def _sample_cache(root: Path, images_per_class: int = 20) -> None:
    """A cache file under the full dataset's name holding only the sample characters (loads in no time)."""
    payload = build_payload(32, images_per_class, 0, characters=SAMPLE)
    glyphs.write_cache(cache_file(root, 32, images_per_class, 0), payload)


def test_a_tiny_fit_and_test_through_the_trainer(tmp_path):
    _sample_cache(tmp_path)
    data = EpisodicDataModule(
        dataset="glyphs-hard", root=str(tmp_path), image_size=32, channels=3, ways=5, shots=1, queries=3,
        episodes_per_batch=2, val_episodes=4, test_episodes=10,
    )  # fmt: skip
    model = ProtoNet(in_channels=3, image_size=32, backbone_options={"hidden": 8})
    trainer = tiny_trainer(max_steps=4, val_check_interval=2)
    trainer.fit(model, datamodule=data)
    (metrics,) = trainer.test(model, datamodule=data, verbose=False)
    assert data.data is not None
    assert data.data.image_shape == (3, 32, 32)
    assert metrics["test/episodes"] == 10
    assert 0.0 <= metrics["test/acc"] <= 1.0


@pytest.mark.slow
def test_ddp_renders_once_and_every_rank_trains_on_the_same_images(monkeypatch, tmp_path):
    """Rank 0 renders and caches the dataset in ``prepare_data``; rank 1 reads that file; the ranks stay in step."""
    log = tmp_path / "renders.txt"

    def logged_build(image_size: int, images_per_class: int, seed: int, **_: object) -> dict:
        with log.open("a") as handle:
            handle.write(f"{os.getpid()}\n")
        return build_payload(image_size, images_per_class, seed, characters=SAMPLE)

    class SameOnEveryRank(Callback):
        def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            flat = torch.cat([p.detach().flatten() for p in pl_module.parameters()])
            gathered = trainer.strategy.all_gather(flat)
            assert torch.equal(gathered[0], gathered[1]), "the ranks' parameters differ"
            images = data.data.images if data.data is not None else torch.zeros(())
            assert trainer.strategy.all_gather(images.sum(dtype=torch.int64)).unique().numel() == 1

    monkeypatch.setattr(glyphs_hard, "build_payload", logged_build)
    data = EpisodicDataModule(
        dataset="glyphs-hard", root=str(tmp_path / "cache"), image_size=32, channels=3, ways=5, shots=1,
        queries=2, episodes_per_batch=2, val_episodes=4, test_episodes=4,
    )  # fmt: skip
    trainer = tiny_trainer(devices=2, max_steps=3, callbacks=[SameOnEveryRank()], limit_val_batches=0)
    trainer.fit(ProtoNet(in_channels=3, image_size=32, backbone_options={"hidden": 8}), datamodule=data)
    assert len(log.read_text().splitlines()) == 1
    assert read_cache(cache_file(tmp_path / "cache", 32, 20, 0), 32, 20) is not None


@pytest.mark.slow
def test_fit_from_the_cli_with_the_data_config(tmp_path):
    _sample_cache(tmp_path)
    root = Path(__file__).resolve().parents[2]
    command = [
        str(Path(sys.executable).parent / "lightning-episodes"), "fit",
        "--config", str(root / "configs/data/glyphs_hard_5w1s.yaml"),
        "--config", str(root / "configs/models/protonet_euclidean_conv4.yaml"),
        f"--data.root={tmp_path}", "--data.episodes_per_batch=2", "--data.queries=2", "--data.val_episodes=4",
        "--data.test_episodes=6", "--model.backbone_options.hidden=8", "--trainer.max_steps=3",
        "--trainer.val_check_interval=3", "--trainer.logger=false", "--trainer.enable_checkpointing=false",
        "--trainer.enable_progress_bar=false", "--test_after_fit=true",
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "test/acc" in done.stdout + done.stderr


# --- the full dataset ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def full() -> tuple[ImageDataset, float]:
    start = time.perf_counter()
    dataset = load_glyphs_hard()
    return dataset, time.perf_counter() - start


@pytest.mark.slow
def test_full_dataset_is_glyphs_classes_in_colour(full):
    dataset, _ = full
    plain = glyphs.load_glyphs()
    assert dataset.num_classes >= 1000
    assert dataset.class_names == plain.class_names
    assert dataset.splits == plain.splits
    assert dataset.groups == plain.groups
    assert dataset.image_shape == (3, 32, 32)
    assert torch.equal(torch.bincount(dataset.labels), torch.full((dataset.num_classes,), 20))
    assert {split: len(classes) >= 200 for split, classes in dataset.splits.items()} == dict.fromkeys(
        ("train", "validation", "test"), True
    )


def test_difficulty_is_frozen_and_named_in_the_key():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DIFFICULTY.rotation = 0.0  # type: ignore[misc]
    assert str(DIFFICULTY.rotation) in DIFFICULTY.key()
