"""The paper's datasets, loaded through the real code path from tiny fake files in the real formats: read without
learn2learn, downloaded through it, and checked against learn2learn's own readers of the same files.

What every loader shares (splits, class counts, shapes, determinism, argument errors) is in
``test_loader_contract.py``; here: the pixels and names each class keeps, the cache, downloads and the
datasets' own quirks.
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from lightning_episodes.data.datasets import (
    SPLITS,
    ImageDataset,
    available_datasets,
    cub200,
    dtd,
    fgvc_aircraft,
    load_dataset,
    mini_imagenet,
    tiered_imagenet,
    vgg_flowers,
)
from lightning_episodes.data.datasets import cache as cache_module
from lightning_episodes.data.datasets.cache import FORMAT_VERSION, IMAGENET_MEAN, IMAGENET_STD, SourceSplit
from tests.data.fabricate import (
    EXCLUDED,
    WRITERS,
    Fabricated,
    write_fgvc_aircraft,
    write_mini_imagenet,
    write_tiered_imagenet,
)

#: Importing a dataset's module registers it.
MODULES = {module.NAME: module for module in (mini_imagenet, tiered_imagenet, cub200, dtd, fgvc_aircraft, vgg_flowers)}
DATASETS = sorted(MODULES)
#: A file or folder that the missing-dataset error must name.
EXPECTED_FILE = {
    "mini-imagenet": "mini-imagenet-cache-train.pkl",
    "tiered-imagenet": "tiered-imagenet/train_images_png.pkl",
    "cub200": "cubirds200/CUB_200_2011/images",
    "dtd": "describable_textures/dtd/images",
    "fgvc-aircraft": "fgvc-aircraft-2013b/data/labels.pkl",
    "vgg-flowers": "vgg_flower102/imagelabels.mat",
}
#: JPEG may move a solid colour by a level or two; class colours are 16 apart (fabricate.class_colour).
TOLERANCE = 4
#: Datasets stored losslessly (raw pixels, PNG): only rounding in the grayscale conversion may differ.
LOSSLESS = {"mini-imagenet", "tiered-imagenet"}


def _cache_files(root: Path) -> list[Path]:
    return sorted(root.glob("*.pt"))


def _check(name: str, data: ImageDataset, fab: Fabricated, size: int = 84, channels: int = 3) -> None:
    assert data.image_shape == (channels, size, size)
    for split in SPLITS:
        assert [data.class_names[c] for c in data.splits[split]] == fab.split_classes[split]
    counts = torch.bincount(data.labels, minlength=data.num_classes).tolist()
    assert dict(zip(data.class_names, counts, strict=True)) == fab.counts
    rgb = torch.tensor([fab.colours[data.class_names[label]] for label in data.labels.tolist()])
    expected = (
        rgb if channels == 3 else (rgb.double() @ torch.tensor([0.299, 0.587, 0.114], dtype=torch.double))[:, None]
    )
    error = (data.images.double() - expected[:, :, None, None]).abs().amax()
    assert error <= (1 if name in LOSSLESS else TOLERANCE), "every image keeps the colour of its labelled class"
    if channels == 3:
        assert (data.images.int() - torch.tensor(EXCLUDED)[:, None, None]).abs().amax((1, 2, 3)).min() > TOLERANCE
        assert (data.mean, data.std) == (IMAGENET_MEAN, IMAGENET_STD)
    assert data.groups == (None if fab.groups is None else [fab.groups[name] for name in data.class_names])
    if data.groups is not None:  # tiered-ImageNet: 34 categories, 20 / 6 / 8 (Ren et al., 2018)
        assert [len({data.groups[c] for c in data.splits[split]}) for split in SPLITS] == [20, 6, 8]


@pytest.mark.parametrize("name", DATASETS)
def test_loads_the_real_format(name: str, tmp_path: Path) -> None:
    fab = WRITERS[name](tmp_path)
    data = load_dataset(name, root=tmp_path)
    _check(name, data, fab)
    assert name in available_datasets()
    assert set(WRITERS) == set(DATASETS)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "no temporary file is left"
    assert [p.name for p in _cache_files(tmp_path)] == [f"{name}-84px-3ch-v{FORMAT_VERSION}.pt"]


@pytest.mark.parametrize("name", DATASETS)
def test_resizes_and_converts_to_grayscale(name: str, tmp_path: Path) -> None:
    fab = WRITERS[name](tmp_path)
    data = load_dataset(name, root=tmp_path, image_size=12, channels=1, cache_dir=tmp_path / "cache")
    _check(name, data, fab, size=12, channels=1)
    assert len(data.mean) == len(data.std) == 1
    assert [p.name for p in _cache_files(tmp_path / "cache")] == [f"{name}-12px-1ch-v{FORMAT_VERSION}.pt"]


@pytest.mark.parametrize("name", DATASETS)
def test_cache_is_reused_without_the_source(name: str, tmp_path: Path) -> None:
    WRITERS[name](tmp_path / "source")
    first = load_dataset(name, root=tmp_path / "source", cache_dir=tmp_path / "cache")
    shutil.rmtree(tmp_path / "source")
    second = load_dataset(name, root=tmp_path / "source", cache_dir=tmp_path / "cache")
    assert torch.equal(first.images, second.images)
    assert torch.equal(first.labels, second.labels)
    assert (first.class_names, first.splits, first.groups) == (
        second.class_names,
        second.splits,
        second.groups,
    )


@pytest.mark.parametrize("name", DATASETS)
def test_missing_dataset_names_the_layout_and_the_download_option(name: str, tmp_path: Path) -> None:
    root = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match="Expected layout") as error:
        load_dataset(name, root=root)
    assert "--data.download true" in str(error.value)
    assert str(root) in str(error.value)
    assert EXPECTED_FILE[name] in str(error.value)
    assert not root.exists(), "nothing is created when nothing can be read"


def _fake_downloads(monkeypatch: pytest.MonkeyPatch, staging: Path) -> None:
    """Replace learn2learn's network calls by copies from ``staging`` (no internet in tests)."""
    import learn2learn.data.utils
    import learn2learn.vision.datasets as l2l
    import learn2learn.vision.datasets.mini_imagenet

    def copy(name: str, destination: str | Path) -> None:
        shutil.copytree(staging / name, Path(destination) / name, dirs_exist_ok=True)

    def dtd_archive(source: str, destination: str) -> None:
        with tarfile.open(destination, "w:gz") as tar:
            tar.add(staging / "describable_textures" / "dtd", arcname="dtd")

    mini = learn2learn.vision.datasets.mini_imagenet
    monkeypatch.setattr(mini, "download_file", lambda source, dest: shutil.copy(staging / Path(dest).name, dest))
    monkeypatch.setattr(l2l.TieredImagenet, "download", lambda self, file_id, dest: copy("tiered-imagenet", dest))
    monkeypatch.setattr(l2l.CUBirds200, "download", lambda self: copy("cubirds200", self.root))
    monkeypatch.setattr(l2l.FGVCAircraft, "download", lambda self: copy("fgvc_aircraft", self.root))
    monkeypatch.setattr(l2l.VGGFlower102, "download", lambda self: copy("vgg_flower102", self.root))
    monkeypatch.setattr(learn2learn.data.utils, "download_file", dtd_archive)


@pytest.mark.parametrize("name", DATASETS)
def test_download_option_reaches_learn2learn(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fab = WRITERS[name](tmp_path / "staging")
    _fake_downloads(monkeypatch, tmp_path / "staging")
    _check(name, load_dataset(name, root=tmp_path / "data" / "new", download=True), fab)


@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param(lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]), id="truncated"),
        pytest.param(lambda path: path.write_bytes(b"not a torch file"), id="garbage"),
        pytest.param(lambda path: torch.save({"format": "lightning-episodes/image-cache"}, path), id="foreign-dict"),
        pytest.param(lambda path: _edit(path, images=torch.zeros(3, 3, 84, 84)), id="float-images"),
        pytest.param(lambda path: _edit(path, labels=torch.full((2 * 102,), 999)), id="labels-out-of-range"),
        pytest.param(lambda path: _edit(path, version=FORMAT_VERSION - 1), id="old-version"),
        pytest.param(lambda path: _flip_a_pixel(path), id="flipped-pixel"),
        pytest.param(lambda path: torch.save({"x": torch.nn.Linear(1, 1)}, path), id="unsafe-pickle"),
    ],
)
def test_corrupt_cache_is_rebuilt(corrupt: Callable[[Path], object], tmp_path: Path) -> None:
    fab = WRITERS["vgg-flowers"](tmp_path)
    first = load_dataset("vgg-flowers", root=tmp_path)
    [path] = _cache_files(tmp_path)
    corrupt(path)
    with pytest.warns(UserWarning, match="not a valid vgg-flowers cache"):
        rebuilt = load_dataset("vgg-flowers", root=tmp_path)
    _check("vgg-flowers", rebuilt, fab)
    assert torch.equal(first.images, rebuilt.images)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_dataset("vgg-flowers", root=tmp_path)  # the rebuilt cache is valid again


def _edit(path: Path, **changes: object) -> None:
    payload = torch.load(path, weights_only=True)
    torch.save({**payload, **changes}, path)


def _flip_a_pixel(path: Path) -> None:
    """Change one stored byte in place, as a disk error would: ``torch.load`` itself does not notice."""
    images = torch.load(path, weights_only=True)["images"]
    data = bytearray(path.read_bytes())
    start = data.find(images[:4].numpy().tobytes())
    assert start > 0
    data[start + 100] ^= 0xFF
    path.write_bytes(bytes(data))
    assert not torch.equal(torch.load(path, weights_only=True)["images"], images)


def test_corrupt_cache_without_source_is_a_clear_error(tmp_path: Path) -> None:
    WRITERS["vgg-flowers"](tmp_path)
    load_dataset("vgg-flowers", root=tmp_path)
    shutil.rmtree(tmp_path / "vgg_flower102")
    _cache_files(tmp_path)[0].write_bytes(b"\0" * 100)
    with pytest.warns(UserWarning, match="not a valid"), pytest.raises(FileNotFoundError, match="download"):
        load_dataset("vgg-flowers", root=tmp_path)


def test_interrupted_write_leaves_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    WRITERS["vgg-flowers"](tmp_path)

    def crash(payload: object, file: object) -> None:
        file.write(b"PK\x03\x04 half a zip")  # type: ignore[attr-defined]
        raise KeyboardInterrupt

    monkeypatch.setattr(cache_module.torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        load_dataset("vgg-flowers", root=tmp_path)
    assert _cache_files(tmp_path) == []
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "the temporary file is removed"
    monkeypatch.undo()
    assert len(load_dataset("vgg-flowers", root=tmp_path).labels) == 204


def test_published_split_sizes_are_enforced(tmp_path: Path) -> None:
    write_mini_imagenet(tmp_path, classes={"train": 5, "validation": 16, "test": 20})
    with pytest.raises(ValueError, match="split 'train' has 5 classes, the published split has 64"):
        load_dataset("mini-imagenet", root=tmp_path)
    assert _cache_files(tmp_path) == []


def test_a_class_without_images_is_refused(tmp_path: Path) -> None:
    WRITERS["cub200"](tmp_path)
    [folder] = (tmp_path / "cubirds200" / "CUB_200_2011" / "images").glob("200.*")
    for image in folder.iterdir():
        image.unlink()
    with pytest.raises(ValueError, match=f"classes without images: {folder.name}"):
        load_dataset("cub200", root=tmp_path)


def test_cub_leaves_out_its_imagenet_duplicates(tmp_path: Path) -> None:
    fab = WRITERS["cub200"](tmp_path)
    data = load_dataset("cub200", root=tmp_path)
    assert fab.excluded == 43
    assert len(data.labels) == sum(fab.counts.values())  # _check: no image has the duplicates' colour


def test_tiered_with_the_released_corrupt_categories_loads_without_groups(tmp_path: Path) -> None:
    fab = write_tiered_imagenet(tmp_path, as_released=True)
    with pytest.warns(UserWarning, match="issue #8"):
        data = load_dataset("tiered-imagenet", root=tmp_path, image_size=8)
    _check("tiered-imagenet", data, fab, size=8)  # fab.groups is None: no group is made up


def test_aircraft_from_the_unpacked_archive_alone(tmp_path: Path) -> None:
    fab = write_fgvc_aircraft(tmp_path, labels_pickle=False)  # no learn2learn labels.pkl yet
    _check("fgvc-aircraft", load_dataset("fgvc-aircraft", root=tmp_path), fab)


def test_default_root_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cache_module.DATA_ROOT_ENV, str(tmp_path / "env-root"))
    with pytest.raises(FileNotFoundError, match="env-root"):
        load_dataset("dtd")


def _without_learn2learn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make learn2learn unimportable, as in an environment without it (its modules already imported included)."""
    for module in [name for name in sys.modules if name.partition(".")[0] == "learn2learn"] + ["learn2learn"]:
        monkeypatch.setitem(sys.modules, module, None)


@pytest.mark.parametrize("name", DATASETS)
def test_reads_the_files_on_disk_without_learn2learn(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fab = WRITERS[name](tmp_path)
    _without_learn2learn(monkeypatch)
    with pytest.raises(ImportError):
        import learn2learn  # noqa: F401
    _check(name, load_dataset(name, root=tmp_path, download=True), fab)  # the files are there: nothing to download


@pytest.mark.parametrize("name", DATASETS)
def test_a_download_without_learn2learn_is_one_line_naming_the_option(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _without_learn2learn(monkeypatch)
    root = tmp_path / "nowhere"
    with pytest.raises(ValueError, match=f"^data.download=true: downloading {name} needs learn2learn") as error:
        load_dataset(name, root=root, download=True)
    message = str(error.value)
    assert "\n" not in message
    assert "which is not installed" in message
    assert "make learn2learn" in message
    assert "scripts/install_learn2learn.sh" in message
    assert not root.exists(), "nothing is created before the download can start"
    with pytest.raises(FileNotFoundError) as missing:  # without the option: where the files go, and how to get them
        load_dataset(name, root=root)
    assert "--data.download true" in str(missing.value)
    assert "learn2learn, which is not installed: install it with `make learn2learn`" in str(missing.value)


def _learn2learn_splits(name: str, root: Path) -> list[SourceSplit]:
    """The splits as learn2learn 0.2.0's readers give them: the readers of the previous versions, kept as the
    reference."""
    import learn2learn.vision.datasets as l2l
    from learn2learn.vision.datasets import cu_birds200, describable_textures, fgvc_aircraft, vgg_flowers

    classes = {"train": 0, "validation": 0, "test": 0} | MODULES[name].SPLIT_CLASSES
    splits = []
    for split in SPLITS:
        if name == "mini-imagenet":
            mini = l2l.MiniImagenet(str(root), mode=split)
            splits.append(SourceSplit(split, list(mini.class_idx), mini, classes[split]))
        elif name == "tiered-imagenet":
            short = "val" if split == "validation" else split
            labels = tiered_imagenet.read_labels(root / "tiered-imagenet" / f"{short}_labels.pkl")
            names = [str(n) for n in labels["label_specific_str"]]
            groups = tiered_imagenet._categories(labels, len(names), split)  # not learn2learn's: it has none
            images = l2l.TieredImagenet(str(root), mode=split)
            splits.append(SourceSplit(split, names, images, classes[split], groups=groups))
        elif name == "cub200":
            birds = l2l.CUBirds200(str(root), mode=split, bounding_box_crop=False)
            keys = [(label, path) for path, label in birds.data]
            order = sorted(range(len(keys)), key=keys.__getitem__)
            splits.append(SourceSplit(split, cu_birds200.SPLITS[split], birds, classes[split], order=order))
        elif name == "dtd":
            textures = l2l.DescribableTextures(str(root), mode=split)
            names = describable_textures.SPLITS[split]
            # its images in os.listdir order, without their names: put them in file-name order as the cache keeps them
            folder = root / "describable_textures" / "dtd" / "images"
            listed = [(j, f) for j, c in enumerate(names) for f in os.listdir(folder / c) if f != ".directory"]
            order = sorted(range(len(listed)), key=listed.__getitem__)
            splits.append(SourceSplit(split, names, textures, classes[split], order=order))
        elif name == "fgvc-aircraft":
            aircraft = l2l.FGVCAircraft(str(root), mode=split, bounding_box_crop=False)
            names = fgvc_aircraft.SPLITS["valid" if split == "validation" else split]
            splits.append(SourceSplit(split, names, aircraft, classes[split]))
        else:
            flowers = l2l.VGGFlower102(str(root), mode=split)
            names = [f"{label:03d}" for label in vgg_flowers.SPLITS[split]]
            splits.append(SourceSplit(split, names, flowers, classes[split]))
    return splits


@pytest.mark.parametrize("name", DATASETS)
def test_the_cache_is_the_one_learn2learn_reading_the_same_files_gives(name: str, tmp_path: Path) -> None:
    """The reference: learn2learn 0.2.0's own readers, converted the same way, give the same cache, byte for byte."""
    pytest.importorskip("learn2learn.vision.datasets")
    WRITERS[name](tmp_path)
    load_dataset(name, root=tmp_path, image_size=16)
    [path] = _cache_files(tmp_path)
    ours = torch.load(path, weights_only=True)
    spec = cache_module.CacheSpec.resolve(name, tmp_path, 16, None, None)
    theirs = cache_module.convert(_learn2learn_splits(name, tmp_path), spec)
    assert ours.keys() == theirs.keys()
    for key, value in theirs.items():
        assert torch.equal(ours[key], value) if isinstance(value, torch.Tensor) else ours[key] == value, key
