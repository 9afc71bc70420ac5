"""Training throughput on Mini-ImageNet-shaped episodes: this library's ``fit`` against learn2learn's ProtoNet loop.

The store is synthesised in memory, as Mini-ImageNet is shaped: uint8 RGB 84x84, 64 training classes x 600 images
(and 16 validation classes, whose fixed episodes score both models after training). Each class is a random 6x6
colour pattern, upsampled, under strong noise: learnable, so that the accuracies after the same steps compare.

* **lightning-episodes**: ``pl.Trainer.fit`` of ``ProtoNet`` (``conv4`` or ``resnet12``) on ``EpisodicDataModule``
  — the default ``NonFiniteGuard``, no validation, no checkpointing, no logger; on CUDA with
  ``data.device_cache`` (the uint8 store on the device) and, with ``--cuda-graphs``, a second row with
  ``model.cuda_graphs``.
* **learn2learn**: its ``TaskDataset`` (``NWays, KShots, LoadData, RemapLabels, ConsecutiveLabels`` over a
  ``MetaDataset``) and its models (``CNN4Backbone(hidden_size=64)``; ``ResNet12Backbone(wider=False)``, the widths
  of our ``resnet12``), in the training loop of its ProtoNet example (``examples/vision/protonet_miniimagenet.py``:
  sort a task by label, embed it, mean support embeddings as prototypes, squared Euclidean logits), over the same
  number of episodes per optimiser step (the gradients of the step's episodes accumulated), Adam lr 1e-3 as ours.

Both on the same device, in one process; each fit's first ``--skip`` steps are left out (warm-up, cuDNN's
autotuning, a graph's capture); on CUDA the clock synchronises at the first and last measured step. Accuracy: both
trained backbones score the same fixed validation episodes with prototypes (the mean and 95% CI over episodes).

    python -m benchmarks.miniimagenet_fit --device cuda --steps 60 --skip 10 --cuda-graphs
    python -m benchmarks.miniimagenet_fit --quick        # CPU, tiny sizes: checks that it runs (CI)
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F  # noqa: N812
from lightning_fabric.utilities.apply_func import move_data_to_device
from torch import Tensor, nn

from benchmarks._timing import machine, set_threads, table
from benchmarks.episode_assembly import UInt8Images
from lightning_episodes import EpisodicDataModule, ProtoNet
from lightning_episodes.callbacks import NonFiniteGuard
from lightning_episodes.data.datasets.base import ImageDataset, register_dataset

NAME = "mini-imagenet-shaped"
MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
#: the store's shape: (training classes, validation classes, images per class, image size); set by ``main``
SHAPE = {"train": 64, "validation": 16, "per_class": 600, "size": 84}
_STORE: dict[tuple[int, ...], ImageDataset] = {}


def synthesize(train: int, validation: int, per_class: int, size: int, seed: int = 0) -> ImageDataset:
    """uint8 ``[N, 3, size, size]`` images: each class a random 6x6 colour pattern (upsampled) under noise."""
    g = torch.Generator().manual_seed(seed)
    classes = train + validation
    images = torch.empty(classes * per_class, 3, size, size, dtype=torch.uint8)
    for c in range(classes):  # a class at a time: the float intermediates stay small
        pattern = F.interpolate(torch.rand(1, 3, 6, 6, generator=g), size=(size, size), mode="nearest")
        noise = torch.rand(per_class, 3, size, size, generator=g)
        images[c * per_class : (c + 1) * per_class] = ((0.25 * pattern + 0.75 * noise) * 255).to(torch.uint8)
    return ImageDataset(
        images=images,
        labels=torch.arange(classes).repeat_interleave(per_class),
        class_names=[f"class{c}" for c in range(classes)],
        splits={"train": list(range(train)), "validation": list(range(train, classes)), "test": []},
        mean=MEAN,
        std=STD,
    )


@register_dataset(NAME)
def load(root: Path | None = None, image_size: int | None = None, channels: int | None = None, **_: Any) -> Any:
    key = (SHAPE["train"], SHAPE["validation"], SHAPE["per_class"], SHAPE["size"])
    if key not in _STORE:
        _STORE.clear()
        _STORE[key] = synthesize(*key)
    return _STORE[key]


class Clock(pl.Callback):
    """Times at which training steps end (synchronised with CUDA at the first and last measured step)."""

    def __init__(self, skip: int, steps: int) -> None:
        self.skip, self.steps, self.ends = skip, steps, []  # type: ignore[var-annotated]

    def on_train_batch_end(self, trainer: pl.Trainer, module: Any, outputs: Any, batch: Any, idx: int) -> None:
        if idx in (self.skip - 1, self.steps - 1) and module.device.type == "cuda":
            torch.cuda.synchronize()
        self.ends.append(time.perf_counter())


def data_module(args: argparse.Namespace, shots: int, device_cache: bool) -> EpisodicDataModule:
    dm = EpisodicDataModule(
        dataset=NAME,
        ways=5,
        shots=shots,
        queries=args.queries,
        episodes_per_batch=args.episodes,
        eval_episodes_per_batch=args.episodes,
        val_episodes=args.eval_episodes,
        test_split="validation",
        image_size=SHAPE["size"],
        channels=3,
        device_cache=device_cache,
        seed=0,
    )
    dm.prepare_data()
    dm.setup("fit")
    return dm


def ours(args: argparse.Namespace, backbone: str, shots: int, device: str, cuda_graphs: bool) -> tuple[float, Any]:
    """Episodes/s of ``trainer.fit`` and the trained backbone."""
    pl.seed_everything(0, verbose=False)
    model = ProtoNet(backbone=backbone, in_channels=3, image_size=SHAPE["size"], cuda_graphs=cuda_graphs)
    clock = Clock(args.skip, args.steps)
    trainer = pl.Trainer(
        accelerator=device,
        devices=1,
        max_steps=args.steps,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[clock, NonFiniteGuard()],  # the guard every command-line run has
    )
    trainer.fit(model, datamodule=data_module(args, shots, device_cache=device == "cuda"))
    seconds = clock.ends[-1] - clock.ends[args.skip - 1]
    return args.episodes * (args.steps - args.skip) / seconds, model.backbone


def l2l_taskset(dataset: ImageDataset, shots: int, queries: int) -> Any:
    import learn2learn as l2l
    from learn2learn.data.transforms import ConsecutiveLabels, KShots, LoadData, NWays, RemapLabels

    rows = [i for i, label in enumerate(dataset.labels.tolist()) if label in set(dataset.splits["train"])]
    labels = dataset.labels[rows].tolist()
    by_label: dict[int, list[int]] = {}
    for index, label in enumerate(labels):
        by_label.setdefault(label, []).append(index)
    meta = l2l.data.MetaDataset(UInt8Images(dataset.images[rows], labels), labels_to_indices=by_label)
    transforms = [NWays(meta, 5), KShots(meta, shots + queries), LoadData(meta), RemapLabels(meta)]
    return l2l.data.TaskDataset(meta, task_transforms=[*transforms, ConsecutiveLabels(meta)], num_tasks=-1)


def l2l_model(backbone: str) -> nn.Module:
    import learn2learn as l2l

    if backbone == "conv4":
        return l2l.vision.models.CNN4Backbone(hidden_size=64, channels=3, max_pool=True)
    return l2l.vision.models.ResNet12Backbone(wider=False)  # TADAM's widths 64-128-256-512, as our resnet12


def normalize(images: Tensor) -> Tensor:
    mean = torch.tensor(MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=images.device).view(1, 3, 1, 1)
    return (images.float() / 255 - mean) / std


def l2l_episode_loss(model: nn.Module, data: Tensor, labels: Tensor, shots: int, queries: int) -> Tensor:
    """The loss of one task as learn2learn's ProtoNet example computes it."""
    order = torch.sort(labels)
    data, labels = data[order.indices], labels[order.indices]
    embeddings = model(data)
    support = torch.zeros(data.size(0), dtype=torch.bool)
    for offset in range(shots):
        support[torch.arange(5) * (shots + queries) + offset] = True
    prototypes = embeddings[support].reshape(5, shots, -1).mean(dim=1)
    query = embeddings[~support]
    logits = -((query.unsqueeze(1) - prototypes.unsqueeze(0)) ** 2).sum(dim=2)
    return F.cross_entropy(logits, labels[~support].long())


def theirs(args: argparse.Namespace, backbone: str, shots: int, device: str) -> tuple[float, nn.Module]:
    """Episodes/s of learn2learn's ProtoNet loop over its TaskDataset, and the trained backbone."""
    pl.seed_everything(0, verbose=False)
    taskset = l2l_taskset(load(), shots, args.queries)
    model = l2l_model(backbone).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    ends = []
    for step in range(args.steps):
        optimizer.zero_grad()
        for _ in range(args.episodes):
            data, labels = taskset.sample()
            loss = l2l_episode_loss(model, normalize(data.to(device)), labels.to(device), shots, args.queries)
            (loss / args.episodes).backward()
        optimizer.step()
        if device == "cuda" and step in (args.skip - 1, args.steps - 1):
            torch.cuda.synchronize()
        ends.append(time.perf_counter())
    return args.episodes * (args.steps - args.skip) / (ends[-1] - ends[args.skip - 1]), model


@torch.no_grad()
def accuracy(backbone: nn.Module, dm: EpisodicDataModule, device: str) -> tuple[float, float]:
    """Mean query accuracy (and 95% CI) over the fixed validation episodes, prototypes from the backbone's
    embeddings (the backbone in eval mode: its running batch-norm statistics)."""
    backbone = backbone.to(device).eval()
    scores = []
    for batch in dm.val_dataloader():
        episode = dm.assemble(move_data_to_device(batch, device))
        for b in range(len(episode)):
            support = backbone(episode.support[b]).flatten(1)
            query = backbone(episode.query[b]).flatten(1)
            prototypes = support.reshape(5, -1, support.shape[-1]).mean(dim=1)  # class-major support
            predicted = torch.cdist(query, prototypes).argmin(dim=1)
            scores.append(float((predicted == episode.query_labels[b]).float().mean()))
    mean = sum(scores) / len(scores)
    sd = math.sqrt(sum((s - mean) ** 2 for s in scores) / max(len(scores) - 1, 1))
    return mean, 1.96 * sd / math.sqrt(len(scores))


def main(argv: list[str] | None = None) -> list[list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--backbones", default="conv4,resnet12", help="comma-separated: conv4, resnet12")
    parser.add_argument("--shots", default="1,5", help="comma-separated shots per class (5 ways, 15 queries)")
    parser.add_argument("--steps", type=int, default=60, help="optimiser steps per fit (default 60)")
    parser.add_argument("--skip", type=int, default=10, help="steps left out at the start (default 10)")
    parser.add_argument("--episodes", type=int, default=16, help="episodes per step (default 16)")
    parser.add_argument("--eval-episodes", type=int, default=160, help="validation episodes scored (default 160)")
    parser.add_argument("--cuda-graphs", action="store_true", help="also ours with model.cuda_graphs (CUDA)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--quick", action="store_true", help="CPU-sized: 32 px, 8+5 classes x 30, 2 episodes")
    args = parser.parse_args(argv)
    args.queries = 15
    if args.quick:
        SHAPE.update(train=8, validation=5, per_class=30, size=32)
        args.backbones, args.shots, args.steps, args.skip, args.episodes, args.eval_episodes = "conv4", "1", 4, 1, 2, 4
        args.queries = 5
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available")
    if args.cuda_graphs and args.device != "cuda":
        parser.error("--cuda-graphs needs --device cuda")
    if args.steps - args.skip < 1 or args.skip < 1:
        parser.error("--skip must be >= 1 and below --steps")
    set_threads(args.threads)
    print(f"Before: {machine()}")
    try:
        import learn2learn  # noqa: F401
    except ImportError as error:  # a device without it still measures ours
        print(f"learn2learn is not importable ({error}): its rows are left out")
        with_l2l = False
    else:
        with_l2l = True
    rows = []
    for backbone in args.backbones.split(","):
        for shots in [int(s) for s in args.shots.split(",")]:
            evaluation = data_module(args, shots, device_cache=False)  # scored episodes assembled on the CPU
            rates: dict[str, tuple[float, tuple[float, float]]] = {}
            contenders = [("lightning-episodes", False)] + ([("+ cuda_graphs", True)] if args.cuda_graphs else [])
            for name, graphs in contenders:
                rate, net = ours(args, backbone, shots, args.device, graphs)
                rates[name] = (rate, accuracy(net, evaluation, args.device))
            if with_l2l:
                rate, net = theirs(args, backbone, shots, args.device)
                rates["learn2learn"] = (rate, accuracy(net, evaluation, args.device))
            l2l_rate = rates["learn2learn"][0] if with_l2l else math.nan
            for name, (rate, (acc, ci)) in rates.items():
                shape = f"{backbone} 5w{shots}s{args.queries}q x {args.episodes}"
                row = [
                    shape,
                    name,
                    f"{rate:,.1f}",
                    f"{rate / l2l_rate:.2f}x" if with_l2l else "–",
                    f"{100 * acc:.1f} ± {100 * ci:.1f}",
                ]
                rows.append(row)
    print(f"After:  {machine()}\n")
    size = SHAPE["size"]
    print(
        f"{args.device}: {SHAPE['train']} classes x {SHAPE['per_class']} uint8 RGB {size}x{size}; {args.steps} steps, "
        f"the first {args.skip} left out; accuracy on {args.eval_episodes} fixed validation episodes of "
        f"{SHAPE['validation']} other classes after the same steps\n"
    )
    print(table(["episodes", "contender", "episodes/s", "vs learn2learn", "val accuracy % (95% CI)"], rows))
    return rows


if __name__ == "__main__":
    main()
