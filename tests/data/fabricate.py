"""Tiny fake datasets written in the exact on-disk formats that the real loaders (and learn2learn) read.

Every class gets its own solid colour, so a test can check that each loaded image still shows the
colour of the class its label names. Class names are the real ones wherever a loader selects classes
by name (Meta-Dataset's split lists and CUB's ImageNet-duplicate list, as learn2learn holds them).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.io
from PIL import Image

from lightning_episodes.data.datasets import meta_dataset_splits as splits
from lightning_episodes.testing.datasets import RGB, Fabricated  # what a writer returns: what the loader must make

#: Colour of images that a loader must leave out (never a class colour, see :meth:`Fabricated.add`).
EXCLUDED = (255, 0, 255)


def solid(colour: RGB, size: tuple[int, int] = (21, 15)) -> Image.Image:
    """A solid-colour RGB image of ``size`` = (width, height)."""
    return Image.new("RGB", size, colour)


def write_mini_imagenet(root: Path, per_class: int = 2, classes: dict[str, int] | None = None) -> Fabricated:
    """``mini-imagenet-cache-{split}.pkl``: ``image_data`` uint8 [N, 84, 84, 3] and ``class_dict``."""
    classes = classes or {"train": 64, "validation": 16, "test": 20}
    offsets = np.cumsum([0, *classes.values()]).tolist()
    fab = Fabricated(
        {s: [f"n{o + i:08d}" for i in range(k)] for (s, k), o in zip(classes.items(), offsets[:-1], strict=True)}
    )
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for split, names in fab.split_classes.items():
        rows = rng.permutation(len(names) * per_class)  # a class's rows are scattered, as listed in class_dict
        image_data = np.zeros((len(rows), 84, 84, 3), dtype=np.uint8)
        class_dict = {}
        for c, name in enumerate(names):
            mine = sorted(rows[c * per_class : (c + 1) * per_class].tolist())
            image_data[mine] = fab.add(name, per_class)
            class_dict[name] = mine
        with open(root / f"mini-imagenet-cache-{split}.pkl", "wb") as file:
            pickle.dump({"image_data": image_data, "class_dict": class_dict}, file)
    return fab


def write_tiered_imagenet(root: Path, per_class: int = 2, as_released: bool = False) -> Fabricated:
    """``tiered-imagenet/{train,val,test}_{images_png,labels}.pkl`` as in Ren et al. (2018).

    With ``as_released``, ``label_general`` is numbered the way the released files' generator did it
    (the count of categories seen before the class: few-shot-ssl-public issue #8), so it is corrupt.
    """
    layout = {"train": (351, 20, "train"), "validation": (97, 6, "val"), "test": (160, 8, "test")}
    fab = Fabricated({}, groups=None if as_released else {})
    folder = root / "tiered-imagenet"
    folder.mkdir(parents=True)
    for s, (split, (num_classes, num_categories, short)) in enumerate(layout.items()):
        names = [f"n{len(fab.colours) + c:08d}" for c in range(num_classes)]
        categories = [f"n{90000000 + 100 * s + g:08d}" for g in range(num_categories)]
        fab.split_classes[split] = names
        pngs = []
        for name in names:
            encoded = io.BytesIO()
            solid(fab.add(name, per_class), (84, 84)).save(encoded, format="PNG")
            pngs.append(np.frombuffer(encoded.getvalue(), dtype=np.uint8))  # cv2.imencode's output type
        specific = np.arange(num_classes * per_class) % num_classes  # images of a class interleaved
        category = np.arange(num_classes) % num_categories  # class c is in category c % num_categories
        released = np.minimum(np.arange(num_classes), num_categories)  # categories seen before class c
        general = (released if as_released else category)[specific]
        if fab.groups is not None:
            fab.groups.update({name: categories[c] for name, c in zip(names, category.tolist(), strict=True)})
        labels = {  # int32 arrays and str lists, as Ren et al.'s generator saved them
            "label_specific": specific.astype(np.int32),
            "label_general": general.astype(np.int32),
            "label_specific_str": names,
            "label_general_str": categories,
        }
        with open(folder / f"{short}_images_png.pkl", "wb") as file:
            pickle.dump([pngs[c] for c in specific], file)
        with open(folder / f"{short}_labels.pkl", "wb") as file:
            pickle.dump(labels, file)
    return fab


def write_cub200(root: Path, per_class: int = 2) -> Fabricated:
    """``cubirds200/CUB_200_2011/images/<class>/<image>.jpg`` plus CUB's 43 ImageNet duplicates."""
    fab = Fabricated({s: list(splits.CUB200[s]) for s in ("train", "validation", "test")})
    images = root / "cubirds200" / "CUB_200_2011" / "images"
    folders = {}
    for names in fab.split_classes.values():
        for name in names:
            species = name.split(".", 1)[1]
            folders[species.lower()] = images / name
            _write_jpegs(
                images / name,
                fab.add(name, per_class),
                [f"{species}_{j:04d}_{j}.jpg" for j in range(per_class)],
            )
    for duplicate in [name for names in splits.CUB200_IMAGENET_DUPLICATES.values() for name in names]:
        solid(EXCLUDED).save(folders[duplicate.rsplit("_", 2)[0].lower()] / duplicate, quality=95)
        fab.excluded += 1
    return fab


def write_dtd(root: Path, per_class: int = 2) -> Fabricated:
    """``describable_textures/dtd/images/<class>/<class>_NNNN.jpg`` (and a KDE ``.directory`` file)."""
    fab = Fabricated({s: list(splits.DTD[s]) for s in ("train", "validation", "test")})
    images = root / "describable_textures" / "dtd" / "images"
    for names in fab.split_classes.values():
        for name in names:
            _write_jpegs(images / name, fab.add(name, per_class), [f"{name}_{j + 1:04d}.jpg" for j in range(per_class)])
    (images / fab.split_classes["train"][0] / ".directory").write_text("[Dolphin]\nTimestamp=2013,1,1\n")
    return fab


def write_fgvc_aircraft(root: Path, per_class: int = 2, labels_pickle: bool = True) -> Fabricated:
    """``fgvc_aircraft/fgvc-aircraft-2013b/data/``: images, variant lists and learn2learn's ``labels.pkl``."""
    fab = Fabricated({s: list(splits.FGVC_AIRCRAFT[s]) for s in ("train", "validation", "test")})
    data = root / "fgvc_aircraft" / "fgvc-aircraft-2013b" / "data"
    families: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    for names in fab.split_classes.values():
        for name in names:
            ids = [f"{1000000 + len(fab.colours) * per_class + j:07d}" for j in range(per_class)]
            _write_jpegs(data / "images", fab.add(name, per_class), [f"{i}.jpg" for i in ids])
            for image in ids:  # the archive's own partition is unrelated to Meta-Dataset's
                families[("train", "val", "test")[int(image) % 3]].append(f"{image} {name}")
    pairs = []
    for family, lines in families.items():
        (data / f"images_variant_{family}.txt").write_text("".join(f"{line}\n" for line in lines))
        pairs += [tuple(line.split(" ", 1)) for line in lines]
    if labels_pickle:
        with open(data / "labels.pkl", "wb") as file:
            pickle.dump(pairs, file)
    return fab


def write_vgg_flowers(root: Path, per_class: int = 2) -> Fabricated:
    """``vgg_flower102/jpg/image_NNNNN.jpg`` and ``imagelabels.mat`` (labels 1..102 as doubles)."""
    fab = Fabricated({s: [f"{label:03d}" for label in splits.VGG_FLOWERS[s]] for s in ("train", "validation", "test")})
    for names in fab.split_classes.values():
        for name in names:
            fab.add(name, per_class)
    labels = np.arange(102 * per_class) % 102 + 1  # image n shows label (n - 1) % 102 + 1
    folder = root / "vgg_flower102"
    for n, label in enumerate(labels, start=1):
        _write_jpegs(folder / "jpg", fab.colours[f"{label:03d}"], [f"image_{n:05d}.jpg"])
    scipy.io.savemat(folder / "imagelabels.mat", {"labels": labels[None].astype(np.float64)})
    return fab


def _write_jpegs(folder: Path, colour: RGB, names: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for j, name in enumerate(names):
        solid(colour, (21 + j, 15)).save(folder / name, quality=95)


def write_folder(root: Path, per_class: int = 3, classes: dict[str, int] | None = None) -> Fabricated:
    """``root/{train,val,test}/<class>/<image>.png``: the folder dataset's layout, PNG and JPEG files."""
    classes = classes or {"train": 5, "validation": 3, "test": 3}
    fab = Fabricated({s: [f"{s}_class{c}" for c in range(k)] for s, k in classes.items()})
    for split, names in fab.split_classes.items():
        for name in names:
            folder = root / ("val" if split == "validation" else split) / name
            folder.mkdir(parents=True)
            colour = fab.add(name, per_class)
            for j in range(per_class):
                solid(colour, (21 + j, 15)).save(folder / f"img{j}.{'png' if j % 2 else 'jpg'}", quality=95)
    return fab


def write_npz_example(root: Path, per_class: int = 3) -> Fabricated:
    """``root/my_dataset/{train,val,test}.npz`` of the guide's example loader (``tests/data/example_dataset.py``):
    each split its own image size, images of a class scattered, class names not in sorted order, RGBA test images."""
    classes = {"train": "tulip daisy rose iris lily", "validation": "poppy aster orchid", "test": "violet lotus peony"}
    fab = Fabricated({split: names.split() for split, names in classes.items()})
    rng = np.random.default_rng(0)
    (root / "my_dataset").mkdir(parents=True, exist_ok=True)
    for (split, names), (height, width, channels) in zip(
        fab.split_classes.items(), [(20, 24, 3), (32, 16, 3), (12, 12, 4)], strict=True
    ):
        labels = rng.permutation(np.arange(len(names) * per_class) % len(names))
        colours = np.array([(*fab.add(name, per_class), 255)[:channels] for name in names], dtype=np.uint8)
        images = np.broadcast_to(colours[labels][:, None, None], (len(labels), height, width, channels))
        np.savez(
            root / "my_dataset" / ("val.npz" if split == "validation" else f"{split}.npz"),
            images=images,
            labels=labels,
            class_names=np.array(names),
        )
    return fab


#: Characters of every glyphs split, no two alike: train (Latin, digits, arrows), validation (Braille, box
#: drawing, block elements), test (Greek, Cyrillic, Armenian).
GLYPHS_CHARACTERS = {"train": "ABg0→", "validation": "⠿─▌", "test": "ΩλЖԱ"}


def write_glyphs_100(root: Path, images_per_class: int = 3) -> Fabricated:
    """The cache file ``glyphs-100`` reads from ``root`` for ``images_per_class``, seed 0 and 32 px, rendered for the
    letters of :data:`GLYPHS_CHARACTERS` alone (7 letters: split 5/1/1 by the 64/16/20 shares, at random)."""
    from lightning_episodes.data.datasets import glyphs_100, rendered

    payload = glyphs_100.build_payload(32, images_per_class, 0, characters="".join(GLYPHS_CHARACTERS.values()))
    rendered.write_cache(glyphs_100.cache_file(root, 32, images_per_class, 0), payload)
    letters = payload["characters"]
    splits = glyphs_100.split_classes(len(letters))
    fab = Fabricated({split: [letters[k] for k in ids] for split, ids in splits.items()})
    fab.counts = dict.fromkeys(letters, images_per_class)
    return fab


def write_glyphs(root: Path, images_per_class: int = 3, hard: bool = False) -> Fabricated:
    """The cache file ``glyphs`` (or ``glyphs-hard``) reads from ``root`` for ``images_per_class``, seed 0 and
    the default image size, rendered for :data:`GLYPHS_CHARACTERS` alone (a real rendering, few classes)."""
    from lightning_episodes.data.datasets import glyphs, glyphs_hard, rendered

    module, size = (glyphs_hard, 32) if hard else (glyphs, 28)
    characters = "".join(GLYPHS_CHARACTERS.values())
    payload = module.build_payload(size, images_per_class, 0, characters=characters)
    rendered.write_cache(module.cache_file(root, size, images_per_class, 0), payload)
    fab = Fabricated({s: sorted(chars, key=ord) for s, chars in GLYPHS_CHARACTERS.items()})
    fab.counts = dict.fromkeys(characters, images_per_class)
    return fab


#: Dataset name → writer, for parametrised tests.
WRITERS: dict[str, Callable[[Path], Fabricated]] = {
    "mini-imagenet": write_mini_imagenet,
    "tiered-imagenet": write_tiered_imagenet,
    "cub200": write_cub200,
    "dtd": write_dtd,
    "fgvc-aircraft": write_fgvc_aircraft,
    "vgg-flowers": write_vgg_flowers,
}
