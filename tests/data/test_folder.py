"""The folder dataset on small real image files written by the tests: layout, conversion, cache, errors, training.

The loader contract (splits, counts, shapes, determinism, a root that is a file) is in ``test_loader_contract.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from PIL import Image

from lightning_episodes import EpisodicDataModule, ProtoNet, load_episodic_module
from lightning_episodes.data.datasets import ImageDataset, load_dataset
from lightning_episodes.data.datasets import folder as folder_module
from tests.helpers import tiny_trainer

COUNTS = {"train": (5, 6), "val": (3, 5), "test": (3, 4)}  # split folder -> (classes, images per class)


def _write_tree(root: Path, seed: int = 0, validation_name: str = "val") -> dict[str, list[Path]]:
    """RGB images of assorted sizes, PNG and JPEG, class names out of creation order."""
    rng = np.random.default_rng(seed)
    written: dict[str, list[Path]] = {}
    for split, (classes, per_class) in COUNTS.items():
        name = validation_name if split == "val" else split
        for c in reversed(range(classes)):  # created in reverse: the order must come from the names
            folder = root / name / f"{split}_class{c}"
            folder.mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, (rng.integers(6, 14), rng.integers(6, 14), 3), dtype=np.uint8)
                path = folder / f"img{i}.{'png' if i % 2 else 'jpg'}"
                Image.fromarray(pixels).save(path)
                written.setdefault(split, []).append(path)
    return written


def _reference(path: Path, size: int = 8) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("L").resize((size, size), Image.Resampling.BILINEAR))


def _load(root: Path, cache: Path) -> ImageDataset:
    return load_dataset("folder", root, image_size=8, channels=1, cache_dir=cache)


def test_splits_classes_and_pixels(tmp_path: Path) -> None:
    _write_tree(tmp_path / "data")
    data = load_dataset("folder", tmp_path / "data", image_size=8, channels=1, cache_dir=tmp_path / "cache")
    assert [len(data.splits[s]) for s in ("train", "validation", "test")] == [5, 3, 3]
    assert data.class_names[:5] == [f"train_class{c}" for c in range(5)]
    assert [data.class_names[c] for c in data.splits["validation"]] == ["val_class0", "val_class1", "val_class2"]
    assert torch.bincount(data.labels).tolist() == [6] * 5 + [5] * 3 + [4] * 3
    # row order: class by class (by name), images by file name; pixels are Pillow's L + bilinear resize
    first = tmp_path / "data/train/train_class0"
    rows = (data.labels == 0).nonzero().flatten()
    for row, path in zip(rows.tolist(), sorted(first.iterdir()), strict=True):
        assert np.array_equal(data.images[row, 0].numpy(), _reference(path))
    # normalisation: the training images' statistics
    train = data.images[torch.isin(data.labels, torch.tensor(data.splits["train"]))].double() / 255
    assert data.mean[0] == pytest.approx(float(train.mean()), abs=1e-9)
    assert data.std[0] == pytest.approx(float(train.std(unbiased=False)), abs=1e-9)


def test_rgb_and_the_validation_folder_name(tmp_path: Path) -> None:
    _write_tree(tmp_path / "data", validation_name="validation")
    data = load_dataset("folder", tmp_path / "data", image_size=10, channels=3)  # cache in the root by default
    assert data.images.shape[1:] == (3, 10, 10)
    assert len(data.mean) == 3
    assert len(data.std) == 3
    assert len(list((tmp_path / "data").glob("folder-*-10px-3ch-v*.pt"))) == 1


def test_cached_and_rebuilt_when_the_folder_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written = _write_tree(tmp_path / "data")
    first = _load(tmp_path / "data", tmp_path / "cache")
    (cache_file,) = (tmp_path / "cache").glob("folder-*.pt")
    # the cache is read, not the images: decoding any image now fails
    monkeypatch.setattr(folder_module, "open_image", lambda path: pytest.fail(f"decoded {path} again"))
    again = _load(tmp_path / "data", tmp_path / "cache")
    assert torch.equal(first.images, again.images)
    assert torch.equal(first.labels, again.labels)
    assert (first.mean, first.std) == (again.mean, again.std)
    monkeypatch.undo()
    # an image more in a class: another fingerprint, a new cache with one more image
    extra = written["train"][0].with_name("zzz.png")
    Image.fromarray(np.full((9, 9, 3), 200, dtype=np.uint8)).save(extra)
    changed = _load(tmp_path / "data", tmp_path / "cache")
    assert len(changed.labels) == len(first.labels) + 1
    assert len(list((tmp_path / "cache").glob("folder-*.pt"))) == 2
    assert cache_file.exists()  # the old one is left for the user to delete


@pytest.mark.parametrize(
    ("breakage", "error", "message"),
    [
        ("no-root", ValueError, "needs data.root"),
        ("missing-test", FileNotFoundError, "has no test/ folder"),
        ("two-validation", ValueError, "has both val/ and validation/"),
        ("empty-class", ValueError, "class folder 'train_class2' .* holds no image"),
        ("text-file", ValueError, r"notes.txt is not an image file"),
        ("broken-image", ValueError, r"broken.png is not a readable image"),
        ("loose-file", ValueError, "must hold one sub-folder per class, found files: stray.png"),
    ],
)
def test_bad_trees_are_clear_errors(tmp_path: Path, breakage: str, error: type[Exception], message: str) -> None:
    root = tmp_path / "data"
    written = _write_tree(root)
    train_class2 = root / "train" / "train_class2"
    if breakage == "missing-test":
        for path in written["test"]:
            path.unlink()
        for folder in sorted((root / "test").iterdir()):
            folder.rmdir()
        (root / "test").rmdir()
    elif breakage == "two-validation":
        (root / "validation").mkdir()
    elif breakage == "empty-class":
        for path in train_class2.iterdir():
            path.unlink()
    elif breakage == "text-file":
        (train_class2 / "notes.txt").write_text("not an image")
    elif breakage == "broken-image":
        (train_class2 / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    elif breakage == "loose-file":
        (root / "train" / "stray.png").write_bytes(written["train"][0].read_bytes())
    with pytest.raises(error, match=message):
        load_dataset("folder", None if breakage == "no-root" else root, image_size=8, channels=1, cache_dir=tmp_path)


def test_episodes_are_checked_against_the_splits(tmp_path: Path) -> None:
    _write_tree(tmp_path / "data")
    options = {"dataset": "folder", "root": str(tmp_path / "data"), "image_size": 8, "channels": 1}
    with pytest.raises(ValueError, match=r"data.eval_ways=4 exceeds the 3 classes of this split"):
        EpisodicDataModule(**options, ways=3, eval_ways=4, shots=1, queries=1).setup("fit")
    message = (
        r"data.shots \+ queries = 7 exceeds the smallest class of this split \(6 samples\) \(dataset 'folder', split "
        r"'train': 5 classes, the smallest 'train_class0' with 6 images\)"
    )
    with pytest.raises(ValueError, match=message):
        EpisodicDataModule(**options, ways=3, shots=2, queries=5, eval_shots=1, eval_queries=1).setup("fit")


def _folder_episodes(root: Path, **options: Any) -> EpisodicDataModule:
    """3-way 2-shot 2-query episodes, 2 a step, of the tree at ``root`` as 16x16 grey images."""
    settings: dict[str, Any] = {
        "ways": 3,
        "shots": 2,
        "queries": 2,
        "episodes_per_batch": 2,
        "image_size": 16,
        "channels": 1,
    }
    return EpisodicDataModule(dataset="folder", root=str(root), **{**settings, **options})


@pytest.mark.slow
def test_fit_and_test_through_the_trainer(tmp_path: Path) -> None:
    _write_tree(tmp_path / "data")
    data = _folder_episodes(tmp_path / "data", eval_queries=2, val_episodes=4, test_episodes=6)
    model = ProtoNet(image_size=16, backbone="conv4", backbone_options={"hidden": 8})
    trainer = tiny_trainer(max_steps=3, val_check_interval=3)
    trainer.fit(model, data)
    assert trainer.global_step == 3
    results = trainer.test(model, data, verbose=False)[0]
    assert results["test/episodes"] == 6
    assert 0.0 <= results["test/acc"] <= 1.0
    # the checkpoint records the folder's statistics, which prediction on new images applies
    trainer.save_checkpoint(tmp_path / "model.ckpt")
    reloaded = load_episodic_module(tmp_path / "model.ckpt")
    assert data.data is not None
    assert reloaded.input_normalization == {"mean": list(data.data.mean), "std": list(data.data.std)}


@pytest.mark.slow
def test_two_process_ddp_trains_as_one_process(tmp_path: Path) -> None:
    """Each DDP rank loads the same cache (built once by rank 0) and takes its slice of the global batch."""
    _write_tree(tmp_path / "data")

    def fit(devices: int) -> dict[str, torch.Tensor]:
        pl.seed_everything(0)
        data = _folder_episodes(tmp_path / "data")
        model = ProtoNet(image_size=16, backbone_options={"hidden": 8})
        tiny_trainer(devices=devices, max_steps=3, limit_val_batches=0, precision="64-true").fit(model, data)
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    one, two = fit(1), fit(2)
    assert len(list((tmp_path / "data").glob("folder-*.pt"))) == 1
    assert one.keys() == two.keys()
    for key in one:
        # the main process receives rank 0's weights in float32; a wrong slice would move them by ~1e-3 per step
        assert torch.allclose(one[key].double(), two[key].double(), rtol=0, atol=1e-6), key
