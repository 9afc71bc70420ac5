#!/usr/bin/env python
"""How close resampling's chosen episodes come to the target, by pool size and proposal, on skewed difficulties.

Importance resampling (``mode: resample``) chooses each step's ``|B|`` episodes from ``pool x |B|`` plain candidates
in proportion to ``w = p / q``; the chosen difficulties follow the target ``p`` exactly only as the pool grows. This
simulates the callback's choice with the library's own parts (a proposal fitted to a warm-up sample, then
``selection_fidelity``: its ``weights`` and ``select_candidates``) on difficulties drawn from a log-normal
(skewness about 2, as the GPU runs' training difficulties) or a normal (skewness 0) distribution. It prints, per
pool and proposal, the Kolmogorov-Smirnov distance from the uniform law of the chosen difficulties' target CDF
values (``target_cdf``: uniform when the choice follows the target), the callback's ``weighting/ks``. Pool 1 is
plain sampling. Means over ``--repeats`` runs, each of ``--steps`` steps of ``--batch`` episodes::

    .venv/bin/python scripts/resample_fidelity.py                 # the table of docs/method.md
    .venv/bin/python scripts/resample_fidelity.py --steps 50 --repeats 1 --pools 1 4   # a quick look
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

import torch

from lightning_episodes.weighting import get_target, make_proposal, selection_fidelity

#: the sample the pools are drawn from (with replacement): large enough to stand for the law itself
SAMPLE = 100_000
#: log-normal sigma of skewness (e^s^2 + 2) sqrt(e^s^2 - 1) = 1.99
SKEWED_SIGMA = 0.55


def draw(kind: str, count: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` difficulties: ``lognormal`` (median 0.5, sigma 0.55 in log space) or ``normal`` (mean 0.5, sd 0.1)."""
    normal = torch.randn(count, generator=generator, dtype=torch.float64)
    return 0.5 * torch.exp(SKEWED_SIGMA * normal) if kind == "lognormal" else 0.5 + 0.1 * normal


def fidelity(
    kind: str, proposal: str, pool: int, steps: int, batch: int, seed: int, target: str = "uniform", warmup: int = 400
) -> float:
    """The KS distance from ``target`` of ``steps x batch`` episodes chosen from pools of ``pool x batch``, with the
    proposal fitted to ``warmup x batch`` draws and the pools drawn from a large sample of the same law."""
    generator = torch.Generator().manual_seed(seed)
    q = make_proposal(proposal)
    q.fit(draw(kind, warmup * batch, generator))
    sample = draw(kind, SAMPLE, generator)
    return selection_fidelity(sample, q, get_target(target), pool, batch, chosen=steps * batch, seed=seed)


def table(kinds: Sequence[str], proposals: Sequence[str], pools: Sequence[int], steps: int, batch: int,
          repeats: int) -> str:  # fmt: skip
    """The Markdown table: a row per difficulty law and proposal, a column per pool."""
    lines = [
        "| difficulties | proposal | " + " | ".join(f"pool {k}" for k in pools) + " |",
        "|---|---|" + "---:|" * len(pools),
    ]
    for kind in kinds:
        for proposal in proposals:
            cells = []
            for pool in pools:
                distances = [fidelity(kind, proposal, pool, steps, batch, seed) for seed in range(repeats)]
                cells.append(f"{sum(distances) / len(distances):.3f}")
            lines.append(f"| {kind} | {proposal} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--kinds", nargs="+", default=["lognormal", "normal"], choices=["lognormal", "normal"])
    parser.add_argument("--proposals", nargs="+", default=["normal", "lognormal", "empirical"])
    parser.add_argument("--pools", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    parser.add_argument("--steps", type=int, default=250, help="steps per run (250 x 4 = 1,000 chosen episodes)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    for name in ("steps", "batch", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if min(args.pools) < 1:
        parser.error("--pools must be >= 1")
    print(table(args.kinds, args.proposals, args.pools, args.steps, args.batch, args.repeats))
    chosen = args.steps * args.batch
    print(f"\nKS distance of the {chosen:,} chosen episodes from the uniform target (mean of {args.repeats} runs; "
          f"{1.36 / math.sqrt(chosen):.3f} is the 5% critical value for {chosen:,} draws).")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
