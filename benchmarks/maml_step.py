"""MAML meta-step time: lightning-episodes' ``MAML`` against learn2learn's ``MAML``, in the same process.

5-way 1-shot episodes with 15 queries per class, conv4 on random 84×84×3 images, 5 inner SGD steps at
0.01, second and first order, meta-batches of 4 and 16 episodes. One meta-step is the forward pass of
every episode (adaptation on the support set, loss on the query set), the backward pass of the mean
query loss and an Adam step. Both models start from the same weights; ours and learn2learn's alternate
within each repeat so that a busy machine slows both alike. Prints medians over the repeats (after
warm-up) and the ratio ours / learn2learn as a markdown table.

    python benchmarks/maml_step.py            # 10 repeats
    python benchmarks/maml_step.py --quick    # 2 repeats, meta-batch 4 only: checks that it runs
    python benchmarks/maml_step.py --device cuda
"""

from __future__ import annotations

import argparse
import functools
import re
import statistics
import time
from collections.abc import Callable

import learn2learn as l2l
import torch
import torch.nn.functional as F

from lightning_episodes.algorithms import MAML
from lightning_episodes.data.episode import Episode

WAYS, SHOTS, QUERIES, SIZE, STEPS, LR = 5, 1, 15, 84, 5, 0.01


def episodes(batch: int, device: torch.device) -> Episode:
    g = torch.Generator().manual_seed(0)
    support = torch.randn(batch, WAYS * SHOTS, 3, SIZE, SIZE, generator=g)
    query = torch.randn(batch, WAYS * QUERIES, 3, SIZE, SIZE, generator=g)
    return Episode.from_tensors(support.to(device), query.to(device), WAYS)


def ours_step(model: MAML, optimizer: torch.optim.Optimizer, batch: Episode) -> None:
    optimizer.zero_grad()
    model.episode_losses(batch).losses.mean().backward()  # the training loss when every weight is 1
    optimizer.step()


def learn2learn_step(maml: l2l.algorithms.MAML, optimizer: torch.optim.Optimizer, batch: Episode) -> None:
    """The meta-step of learn2learn's MAML example (``examples/vision/maml_miniimagenet.py``)."""
    optimizer.zero_grad()
    for i in range(len(batch)):
        learner = maml.clone()
        for _ in range(STEPS):
            learner.adapt(F.cross_entropy(learner(batch.support[i]), batch.support_labels[i]))
        (F.cross_entropy(learner(batch.query[i]), batch.query_labels[i]) / len(batch)).backward()
    optimizer.step()


def learn2learn_copy(model: MAML) -> torch.nn.Module:
    reference = l2l.vision.models.CNN4(output_size=WAYS, channels=3)
    renames = [
        (r"^backbone\.blocks\.(\d+)\.norm\.", r"features.\1.normalize."),
        (r"^backbone\.blocks\.(\d+)\.conv\.", r"features.\1.conv."),
        (r"^head\.", "classifier."),
    ]
    state = {}
    for key, value in model.state_dict().items():
        for pattern, replacement in renames:
            key = re.sub(pattern, replacement, key)
        state[key] = value
    reference.load_state_dict(state, strict=False)  # learn2learn's batch norm also has running buffers
    return reference


def timed(step: Callable[[], None], device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 warm-up, 2 repeats, meta-batch 4 only")
    parser.add_argument("--repeats", type=int, default=None, help="timed meta-steps per setting (default 10)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed meta-steps per setting (default 2)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    repeats = args.repeats or (2 if args.quick else 10)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    batches = (4,) if args.quick else (4, 16)
    print(f"torch {torch.__version__}, {device}, {torch.get_num_threads()} threads, {repeats} repeats\n")
    print("| meta-batch | order | ours (ms) | learn2learn (ms) | ours / learn2learn |")
    print("|---:|---|---:|---:|---:|")
    for batch_size in batches:
        batch = episodes(batch_size, device)
        for first_order in (False, True):
            torch.manual_seed(0)
            model = MAML(
                in_channels=3,
                image_size=SIZE,
                ways=WAYS,
                adaptation_steps=STEPS,
                adaptation_lr=LR,
                first_order=first_order,
            )
            model = model.to(device).train()
            maml = l2l.algorithms.MAML(learn2learn_copy(model).to(device).train(), lr=LR, first_order=first_order)
            ours_opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            theirs_opt = torch.optim.Adam(maml.parameters(), lr=1e-3)
            times: dict[str, list[float]] = {"ours": [], "l2l": []}
            ours_call = functools.partial(ours_step, model, ours_opt, batch)
            theirs_call = functools.partial(learn2learn_step, maml, theirs_opt, batch)
            for repeat in range(warmup + repeats):
                ours, theirs = timed(ours_call, device), timed(theirs_call, device)
                if repeat >= warmup:
                    times["ours"].append(ours)
                    times["l2l"].append(theirs)
            ours_ms, theirs_ms = (1000 * statistics.median(times[k]) for k in ("ours", "l2l"))
            order = "first" if first_order else "second"
            print(f"| {batch_size} | {order} | {ours_ms:.0f} | {theirs_ms:.0f} | {ours_ms / theirs_ms:.2f} |")


if __name__ == "__main__":
    main()
