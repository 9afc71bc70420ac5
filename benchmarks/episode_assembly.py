"""Episode assembly: episodes per second, lightning-episodes against learn2learn and against the copy floor.

5-way 5-shot episodes with 15 queries per class (100 images) from an in-memory Mini-ImageNet-shaped
dataset: 64 classes x 600 images of 3x84x84 uint8 (812 MB), the same tensor for every contender.

* ``floor``: only the copy: the episode's 100 images gathered into a reused buffer with one
  ``index_select(out=...)`` (indices drawn beforehand). Per episode (the goal's definition) and per batch
  of 16 episodes (the shape our loader produces).
* lightning-episodes, each as its ``DataLoader`` is used in training (``batch_size=None``, main process):
  the sampled identities alone, the uint8 batches the loader yields (sampling + gather), and the same
  followed by the float32 normalisation that ``on_after_batch_transfer`` applies.
* learn2learn: ``TaskDataset`` with ``NWays, KShots, LoadData, RemapLabels, ConsecutiveLabels`` over a
  ``MetaDataset`` of the same tensor, one ``taskset.sample()`` per episode as in its examples (support and
  query are not even split); and its fused ``FusedNWaysKShots`` variant.

Goals (issue 7): our loader >= 30x learn2learn's ``TaskDataset`` and within 1.5x of the floor's cost.

    .venv/bin/python -m benchmarks.episode_assembly                # 7 repeats of 1.5 s each
    .venv/bin/python -m benchmarks.episode_assembly --threads 1    # steadier on a busy machine
    .venv/bin/python -m benchmarks.episode_assembly --quick        # 3 short repeats: checks that it runs
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable

import learn2learn as l2l
import torch
from learn2learn.data.transforms import ConsecutiveLabels, FusedNWaysKShots, KShots, LoadData, NWays, RemapLabels
from torch.utils.data import DataLoader, Dataset

from benchmarks._timing import Rate, machine, median, rates, set_threads, spread, table
from lightning_episodes.data import EpisodeAssembler, EpisodeSampler, TrainingEpisodes

CLASSES, PER_CLASS, SHAPE = 64, 600, (3, 84, 84)
WAYS, SHOTS, QUERIES = 5, 5, 15


class UInt8Images(Dataset):
    """``(image, label)`` rows of a uint8 tensor, with ``int`` labels as learn2learn's transforms expect."""

    def __init__(self, images: torch.Tensor, labels: list[int]) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.images[index], self.labels[index]


def mini_imagenet_shaped(classes: int, per_class: int) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.randint(0, 256, (classes * per_class, *SHAPE), dtype=torch.uint8, generator=torch.Generator())
    return images, torch.arange(classes).repeat_interleave(per_class)


def learn2learn_tasksets(images: torch.Tensor, labels: torch.Tensor) -> dict[str, l2l.data.TaskDataset]:
    label_list = labels.tolist()
    by_label: dict[int, list[int]] = {}
    for index, label in enumerate(label_list):
        by_label.setdefault(label, []).append(index)
    dataset = l2l.data.MetaDataset(UInt8Images(images, label_list), labels_to_indices=by_label)
    standard = [
        NWays(dataset, WAYS),
        KShots(dataset, SHOTS + QUERIES),
        LoadData(dataset),
        RemapLabels(dataset),
        ConsecutiveLabels(dataset),
    ]
    fused = [
        FusedNWaysKShots(dataset, n=WAYS, k=SHOTS + QUERIES),
        LoadData(dataset),
        RemapLabels(dataset),
        ConsecutiveLabels(dataset),
    ]
    return {
        "standard": l2l.data.TaskDataset(dataset, task_transforms=standard, num_tasks=-1),
        "fused": l2l.data.TaskDataset(dataset, task_transforms=fused, num_tasks=-1),
    }


def contenders(images: torch.Tensor, labels: torch.Tensor, batch: int) -> dict[str, Callable[[], int]]:
    sampler = EpisodeSampler(labels, range(CLASSES), WAYS, SHOTS, QUERIES)
    assembler = EpisodeAssembler(images, (0.47, 0.45, 0.41), (0.28, 0.27, 0.29))
    per_episode = WAYS * (SHOTS + QUERIES)

    # the floor: indices drawn beforehand (many, so that the copy does not just hit the cache)
    drawn = sampler.sample(0, "offline", 0, range(4096))
    rows = torch.cat([drawn.support_indices.flatten(1), drawn.query_indices.flatten(1)], 1)
    one_buffer = torch.empty(per_episode, *SHAPE, dtype=torch.uint8)
    batch_buffer = torch.empty(batch * per_episode, *SHAPE, dtype=torch.uint8)
    episode_rows = itertools.cycle(rows)
    batch_rows = itertools.cycle(rows[: len(rows) // batch * batch].view(-1, batch * per_episode))

    def floor_episode() -> int:
        torch.index_select(images, 0, next(episode_rows), out=one_buffer)
        return 1

    def floor_batch() -> int:
        torch.index_select(images, 0, next(batch_rows), out=batch_buffer)
        return batch

    steps = itertools.count()

    def ours_identities() -> int:
        sampler.sample(0, "train", next(steps), range(batch))
        return batch

    loader = iter(DataLoader(TrainingEpisodes(sampler, 0, batch, assembler=assembler), batch_size=None))

    def ours_uint8() -> int:
        next(loader)
        return batch

    def ours_float() -> int:
        assembler.normalize(next(loader))
        return batch

    tasksets = learn2learn_tasksets(images, labels)

    def l2l_standard() -> int:
        tasksets["standard"].sample()
        return 1

    def l2l_fused() -> int:
        tasksets["fused"].sample()
        return 1

    return {
        "floor: index_select of 1 episode into a reused buffer": floor_episode,
        f"floor: index_select of {batch} episodes into a reused buffer": floor_batch,
        "lightning-episodes: sampling only (identities)": ours_identities,
        "lightning-episodes: DataLoader batches (uint8)": ours_uint8,
        "lightning-episodes: DataLoader batches + normalise (float32)": ours_float,
        "learn2learn TaskDataset (NWays, KShots, LoadData, RemapLabels, ConsecutiveLabels)": l2l_standard,
        "learn2learn TaskDataset (FusedNWaysKShots, LoadData, RemapLabels, ConsecutiveLabels)": l2l_fused,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 short repeats (a smoke run)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--batch", type=int, default=16, help="episodes per loader batch (16 as in the paper)")
    parser.add_argument("--repeats", type=int, default=None, help="measurements per contender (default 7)")
    parser.add_argument("--seconds", type=float, default=None, help="length of one measurement (default 1.5 s)")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    repeats = args.repeats or (3 if args.quick else 7)
    seconds = args.seconds or (0.3 if args.quick else 1.5)

    images, labels = mini_imagenet_shaped(CLASSES, PER_CLASS)
    print(f"Before: {machine()}")
    measured = rates(contenders(images, labels, args.batch), repeats, seconds, warmup=seconds)
    print(f"After:  {machine()}\n")
    print(f"5-way 5-shot 15-query episodes, {CLASSES} x {PER_CLASS} uint8 images of {SHAPE}, batch {args.batch}, ")
    print(f"{repeats} repeats of {seconds:g} s after warm-up, contenders taking turns; medians.\n")
    print(report(measured, args.batch))


def report(measured: dict[str, list[Rate]], batch: int) -> str:
    """The table (wall clock and CPU time) and the verdict on both goals."""
    names = list(measured)
    floor, floor_batch, ours, learn2learn = names[0], names[1], names[3], names[5]
    wall = {name: median([r.wall for r in rates]) for name, rates in measured.items()}
    cpu = {name: median([r.cpu for r in rates]) for name, rates in measured.items()}
    rows = [
        [
            name,
            f"{wall[name]:,.0f}",
            spread([r.wall for r in measured[name]]),
            f"{1e3 / wall[name]:.3f}",
            f"{wall[name] / wall[learn2learn]:.1f}x",
            f"{wall[floor] / wall[name]:.2f}",
            f"{cpu[name]:,.0f}",
            f"{cpu[name] / cpu[learn2learn]:.1f}x",
            f"{cpu[floor] / cpu[name]:.2f}",
        ]
        for name in names
    ]
    header = [
        "contender",
        "episodes/s",
        "range",
        "ms/episode",
        "vs l2l",
        "cost / floor",
        "episodes per CPU-s",
        "vs l2l (CPU)",
        "cost / floor (CPU)",
    ]
    lines = [table(header, rows), ""]
    for clock, values in (("wall clock", wall), ("CPU time", cpu)):
        speedup, cost = values[ours] / values[learn2learn], values[floor] / values[ours]
        lines.append(
            f"Goals by {clock}: >= 30x learn2learn's TaskDataset: {speedup:.1f}x "
            f"({'met' if speedup >= 30 else 'missed'}; the floor itself is "
            f"{values[floor] / values[learn2learn]:.1f}x); within 1.5x of the floor's cost: {cost:.2f}x "
            f"({'met' if cost <= 1.5 else 'missed'}; {values[floor_batch] / values[ours]:.2f}x of the "
            f"{batch}-episode floor)."
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
