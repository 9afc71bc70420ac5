"""The embedded ``glyphs-100`` dataset: Mini-ImageNet's shape (100 letters x 600 images, 64/16/20 classes),
glyphs-hard's rendering, a fixed choice and split of the classes, colour, a fit through the Trainer and the CLI.

The loader contract (splits partition the classes, shapes, statistics, determinism and the cache) is one row of
``test_loader_contract.py``; the cache machinery it shares with ``glyphs`` is tested in ``test_rendered.py``. Most
tests render a few letters; the test of the full dataset (rendered on first use, under two minutes on two cores) is
marked slow.
"""

from __future__ import annotations

import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lightning_episodes import EpisodicDataModule, ProtoNet
from lightning_episodes.data.datasets import glyphs_100, glyphs_hard, glyphs_hard_render, rendered
from lightning_episodes.data.datasets.glyphs_100 import (
    build_payload,
    cache_file,
    choose_classes,
    load_glyphs_100,
    split_classes,
    to_dataset,
)
from tests.helpers import tiny_trainer

#: letters of several scripts, and characters that are not letters (never chosen)
SAMPLE = "ABgQkΩλЖжԱաლ0,→∑☺⠿─"
LETTERS = "ABQgkΩλЖжԱաლ"  # in code point order


@pytest.fixture(scope="module")
def sample() -> dict:
    return build_payload(image_size=32, images_per_class=4, seed=0, characters=SAMPLE)


def test_only_letters_are_chosen_in_code_point_order(sample: dict) -> None:
    assert sample["characters"] == sorted(LETTERS, key=ord)
    assert all(unicodedata.category(ch).startswith("L") for ch in sample["characters"])
    assert sample["images"].shape == (len(LETTERS), 4, 3, 32, 32)


def test_the_choice_of_letters_is_fixed_and_random() -> None:
    pool = [chr(c) for c in range(0x100, 0x100 + 400) if unicodedata.category(chr(c)).startswith("L")]
    chosen = choose_classes(pool)
    assert len(chosen) == 100 == len(set(chosen))
    assert chosen == choose_classes(pool), "a fixed seed"
    assert chosen == sorted(chosen, key=lambda i: ord(pool[i]))
    assert chosen != list(range(100)), "not the first hundred"
    assert choose_classes(pool[:30]) == list(range(30)), "all of them when there are fewer"


def test_mini_imagenets_split() -> None:
    splits = split_classes(100)
    assert [len(splits[s]) for s in ("train", "validation", "test")] == [64, 16, 20]
    assert splits == split_classes(100), "a fixed seed"
    assert splits["test"] != list(range(80, 100)), "at random, not the last twenty"


@given(count=st.integers(3, 400))
def test_the_split_partitions_the_classes_in_its_shares(count: int) -> None:
    splits = split_classes(count)
    assert sorted(i for ids in splits.values() for i in ids) == list(range(count))
    assert all(ids == sorted(ids) for ids in splits.values())
    assert len(splits["validation"]) == round(0.16 * count)
    assert len(splits["test"]) == round(0.20 * count)


def test_images_are_glyphs_hards_rendering_in_colour(sample: dict) -> None:
    """The same renderer and knobs as glyphs-hard: each letter's images are glyphs-hard's images of it."""
    hard = glyphs_hard.build_payload(32, 4, 0, characters="Ωk")
    for k, ch in enumerate(hard["characters"]):
        assert torch.equal(sample["images"][sample["characters"].index(ch)], hard["images"][k])
    assert glyphs_100.DIFFICULTY == glyphs_hard.DIFFICULTY
    rgb = sample["images"].float()
    assert (rgb[:, :, 0] - rgb[:, :, 1]).abs().mean() > 5, "colour, not grey"


def test_one_channel_is_the_luminance_and_statistics_are_the_training_splits(sample: dict) -> None:
    grey, colour = to_dataset(sample, channels=1), to_dataset(sample, channels=3)
    assert torch.equal(grey.images, glyphs_hard.luma(colour.images))
    train = torch.isin(colour.labels, torch.tensor(colour.splits["train"]))
    for c in range(3):
        pixels = colour.images[train][:, c].double() / 255
        assert colour.mean[c] == pytest.approx(float(pixels.mean()), abs=1e-9)
        assert colour.std[c] == pytest.approx(float(pixels.std(unbiased=False)), abs=1e-9)


def test_the_defaults_are_mini_imagenets_shape() -> None:
    assert (glyphs_100.CLASSES, glyphs_100.IMAGES_PER_CLASS) == (100, 600)
    assert glyphs_100.GLYPHS_100.images_per_class == 600
    assert (glyphs_100.GLYPHS_100.image_size, glyphs_100.GLYPHS_100.channels) == (32, 3)
    name = cache_file(Path("/c"), 32, 600, 0).name
    assert name.startswith("glyphs-100-32px-600per-class-seed0-v1-")
    changed = glyphs_hard_render.Difficulty(rotation=0.0)
    assert cache_file(Path("/c"), 32, 600, 0, changed) != cache_file(Path("/c"), 32, 600, 0), "knobs in the name"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder holding the sample letters at the loader's default 600 images each."""
    root = tmp_path_factory.mktemp("glyphs-100")
    payload = build_payload(32, 600, 0, characters=SAMPLE, processes=rendered.render_processes())
    rendered.write_cache(cache_file(root, 32, 600, 0), payload)
    return root


def test_a_tiny_fit_and_test_through_the_trainer(cache: Path) -> None:
    assert load_glyphs_100(cache).num_classes == len(LETTERS), "the default 600 images per class, from the cache"
    data = EpisodicDataModule(dataset="glyphs-100", root=str(cache), image_size=32, channels=3, ways=2, shots=1,
                              queries=2, episodes_per_batch=2, val_episodes=4, test_episodes=6)  # fmt: skip
    model = ProtoNet(in_channels=3, image_size=32, backbone_options={"hidden": 8})
    trainer = tiny_trainer(max_steps=3, val_check_interval=3)
    trainer.fit(model, datamodule=data)
    (metrics,) = trainer.test(model, datamodule=data, verbose=False)
    assert data.data is not None
    assert (data.data.image_shape, data.data.num_classes) == ((3, 32, 32), len(LETTERS))
    assert metrics["test/episodes"] == 6


@pytest.mark.slow
def test_fit_from_the_cli_with_the_data_config(cache: Path, tmp_path: Path) -> None:
    """The data config, from a cache of the sample letters (2-way: the sample's splits are small)."""
    root = Path(__file__).resolve().parents[2]
    command = [
        str(Path(sys.executable).parent / "lightning-episodes"), "fit",
        "--config", str(root / "configs/data/glyphs_100_5w1s.yaml"),
        "--config", str(root / "configs/models/protonet_euclidean_conv4.yaml"),
        f"--data.root={cache}", "--data.ways=2", "--data.episodes_per_batch=2", "--data.queries=2",
        "--data.val_episodes=4", "--data.test_episodes=6", "--model.backbone_options.hidden=8",
        "--trainer.max_steps=3", "--trainer.val_check_interval=3", "--trainer.logger=false",
        "--trainer.enable_checkpointing=false", "--trainer.enable_progress_bar=false", "--test_after_fit=true",
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "test/acc" in done.stdout + done.stderr


@pytest.mark.slow
def test_the_full_dataset_is_mini_imagenets_shape_with_its_fixed_classes() -> None:
    dataset = load_glyphs_100()
    assert dataset.num_classes == 100
    assert dataset.image_shape == (3, 32, 32)
    assert torch.equal(torch.bincount(dataset.labels), torch.full((100,), 600))
    assert [len(dataset.splits[s]) for s in ("train", "validation", "test")] == [64, 16, 20]
    # the classes never move (a change of fonts would show here, and in the cache file's fingerprint)
    test = "".join(dataset.class_names[k] for k in dataset.splits["test"])
    assert test == "yëĩľƞȢʕʱҐӣӥճṈṣỬᾨᾪῷⴂ𝕡"
