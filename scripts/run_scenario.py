#!/usr/bin/env python
"""One scenario of the paper, in the documented order: the baseline, then the offline schemes from its best checkpoint.

An offline scheme weights episodes by the difficulty a frozen model trained with plain sampling gives them, so the
baseline of the same scenario (data x model) runs first, and its best validation checkpoint becomes the reference
of every offline run. Per seed, this script runs (each a ``fit`` with ``--test_after_fit true``)::

    <out>/<data>__<model>/seed<N>/baseline_online/      plain sampling (configs/sampling/baseline_online.yaml)
    <out>/<data>__<model>/seed<N>/<scheme>_offline/     --trainer.callbacks.reference_checkpoint <baseline's best>
    <out>/<data>__<model>/seed<N>/<scheme>_online/      with --online (--online-only: without the offline runs)
    <out>/<data>__<model>/seed<N>/<config name>/        a scheme named by its sampling config, e.g. uniform_online_psis
    <run>/cross_domain/<config name>/                   with --cross-domain: the run's best checkpoint tested there

``--seed_everything`` and ``--data.train_seed`` are the seed N (initialisation and training episodes differ per
seed; the validation and test episodes are the data config's fixed sets). Rerun the script to resume a campaign:
every run that already has a ``test_results.json`` is skipped, and a run stopped during its fit (a
``checkpoints/last.ckpt``, no record) resumes from that checkpoint (``--ckpt_path last``), losing at most the
sampling config's ``last_every_n_steps`` steps. Then::

    lightning-episodes report <out>/<data>__<model>

Example (Table 1, Mini-ImageNet, conv4, ProtoNet Euclidean, 5-way 1-shot, three seeds)::

    python scripts/run_scenario.py --data configs/data/mini_imagenet_5w1s.yaml \\
        --model configs/models/protonet_euclidean_conv4.yaml --seeds 0 1 2 --online -- --data.root ~/data

Arguments after ``--`` go to every ``fit`` (after the sampling config, so ``--trainer.callbacks.<arg>`` sets the
weighting callback's arguments). ``--dry-run`` prints the commands without running them.

``--schemes baseline`` runs the baseline alone (a calibration of the protocol before any other arm).

``--task-sampling NAME...`` (configs of ``configs/task_sampling``, e.g. ``hard_task_mining``) runs every scheme also
with that task sampler, into ``<scheme>__<NAME>`` beside the plain run (which still runs, or is skipped when done:
it is the arm the sampler is compared with); an offline scheme keeps the plain baseline's checkpoint as its
reference. The task samplers' arms of the data-scarce cells::

    python scripts/run_scenario.py --data configs/data/glyphs_100_5w5s.yaml \
        --model configs/models/protonet_cosine_conv4.yaml --trainer configs/study/scarce_cpu.yaml \
        --schemes baseline --online-only --task-sampling adaptive hard_task_mining no_diversity_batch \
        --seeds 0 --out runs/scarce -- --data.train_images_per_class 60

A scheme is a target (``uniform``, ``easy``, ``hard``, ``curriculum``: run as ``<target>_offline`` and/or
``<target>_online``) or the name of any other config of ``configs/sampling`` (e.g. ``uniform_online_psis``,
``uniform_online_placebo``), run once as it is, with the baseline's best checkpoint as its reference when its name
says ``offline``. The study of docs/study.md (both benchmarks, four arms, three seeds)::

    python scripts/run_scenario.py --data configs/data/glyphs_hard_5w1s.yaml \\
        --model configs/models/protonet_euclidean_conv4.yaml --trainer configs/study/glyphs_cpu.yaml \\
        --online-only --schemes uniform uniform_online_psis uniform_online_placebo --seeds 0 1 2 --out runs/study
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

SAMPLING = Path(__file__).resolve().parent.parent / "configs" / "sampling"
TASK_SAMPLING = SAMPLING.parent / "task_sampling"
SCHEMES = ("uniform", "easy", "hard", "curriculum")
CONFIGS = tuple(sorted(p.stem for p in SAMPLING.glob("*.yaml") if not p.stem.startswith("baseline")))
TASK_SAMPLERS = tuple(sorted(p.stem for p in TASK_SAMPLING.glob("*.yaml")))
RESULTS_FILE = "test_results.json"

Runner = Callable[[list[str]], object]


def finished(run_dir: Path) -> bool:
    """Whether a run folder holds a test record (its fit, test included, completed)."""
    return run_dir.is_dir() and any(run_dir.rglob(RESULTS_FILE))


def interrupted(run_dir: Path) -> bool:
    """Whether a run folder holds a ``last.ckpt`` but no test record: its fit stopped before the end."""
    return not finished(run_dir) and any(
        "cross_domain" not in path.relative_to(run_dir).parts for path in run_dir.rglob("checkpoints/last.ckpt")
    )


def best_checkpoint(run_dir: Path) -> Path:
    """The newest ``best-*.ckpt`` under ``run_dir`` (the CLI's default checkpoint callback names them so).

    Raises:
        FileNotFoundError: if the run saved no best checkpoint.
    """
    found = sorted(run_dir.rglob("checkpoints/best-*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(f"no checkpoints/best-*.ckpt under {run_dir}: did its fit validate at least once?")
    return found[-1]


def run_scenario(
    data: Path,
    model: Path,
    out: Path,
    runner: Runner,
    trainer: Sequence[Path] = (),
    schemes: Sequence[str] = SCHEMES,
    online: bool = False,
    seeds: Sequence[int] = (0,),
    offline: bool = True,
    cross_domain: Sequence[Path] = (),
    extra: Sequence[str] = (),
    dry_run: bool = False,
    task_sampling: Sequence[str] = (),
) -> list[Path]:
    """Run (or, with ``dry_run``, only pass to ``runner``) the scenario's commands; returns the run folders.

    Args:
        data: data config (dataset, ways/shots and the paper's schedule), e.g. ``configs/data/mini_imagenet_5w1s.yaml``.
        model: model config, e.g. ``configs/models/protonet_euclidean_conv4.yaml``.
        out: output root; runs go to ``out/<data>__<model>/seed<N>/<scheme>_<estimate>``.
        runner: executes one ``lightning-episodes`` argument list.
        trainer: optional trainer configs (``configs/trainer/*.yaml``), given after the model config.
        schemes: targets run offline from the baseline's best checkpoint (and online with ``online``), or names of
            sampling configs (``CONFIGS``, e.g. ``uniform_online_psis``), each run once as it is.
        online: also run each scheme with the online estimate (it needs no reference).
        seeds: values of ``--seed_everything`` (the model's initialisation) and ``--data.train_seed`` (the
            training episodes); data.seed, and so the validation and test episodes, stay the data config's.
        offline: run the offline schemes (``False`` with ``online``: online schemes only, no reference needed).
        cross_domain: data configs of ``configs/data`` (e.g. ``cub200.yaml``) on which each run's best checkpoint
            is tested as well.
        extra: arguments appended to every ``fit``.
        dry_run: the baseline is not run, so offline runs name its checkpoint by a placeholder.
        task_sampling: configs of ``configs/task_sampling``: every scheme also runs with each, into
            ``<scheme>__<name>``.
    """
    scenario = out / f"{data.stem}__{model.stem}"
    common = ["--config", str(data), "--config", str(model)]
    for path in trainer:
        common += ["--config", str(path)]
    runs = []
    for seed in seeds:
        folder = scenario / f"seed{seed}"
        baseline = folder / "baseline_online"
        plan: list[tuple[Path, str, str, str | None]] = [(baseline, "baseline_online", "online", None)]
        estimates = [p for p, wanted in (("offline", offline), ("online", online)) if wanted]
        targets = [scheme for scheme in schemes if scheme in SCHEMES]
        for estimate in estimates:
            plan += [(folder / f"{scheme}_{estimate}", f"{scheme}_{estimate}", estimate, None) for scheme in targets]
        for config in (scheme for scheme in schemes if scheme not in SCHEMES and scheme != "baseline"):
            plan.append((folder / config, config, "offline" if "_offline" in config else "online", None))
        plan += [(d.with_name(f"{d.name}__{name}"), c, e, name) for name in task_sampling for d, c, e, _ in plan]
        for run_dir, config, estimate, sampler in plan:
            runs.append(run_dir)
            if finished(run_dir):
                print(f"[run_scenario] {run_dir} is done: skipped", file=sys.stderr)
                continue
            args = ["fit", *common, "--config", str(SAMPLING / f"{config}.yaml")]
            if sampler is not None:
                args += ["--config", str(TASK_SAMPLING / f"{sampler}.yaml")]
            if estimate == "offline":
                reference = Path(f"<best checkpoint of {baseline}>") if dry_run else best_checkpoint(baseline)
                args += [f"--trainer.callbacks.reference_checkpoint={reference}"]
            args += [f"--seed_everything={seed}", f"--data.train_seed={seed}", f"--trainer.default_root_dir={run_dir}"]
            args += ["--test_after_fit=true"]
            if interrupted(run_dir):  # the newest last.ckpt of the run folder, continued in its version folder
                print(f"[run_scenario] {run_dir} was stopped during its fit: resumed", file=sys.stderr)
                args += ["--ckpt_path=last"]
            runner([*args, *extra])
        for run_dir, *_ in plan:
            for config in cross_domain:
                test_dir = run_dir / "cross_domain" / config.stem
                if finished(test_dir):
                    continue
                if dry_run:
                    best, saved = Path(f"<best checkpoint of {run_dir}>"), Path("<the config.yaml beside it>")
                else:
                    best = best_checkpoint(run_dir)
                    saved = best.parent.parent / "config.yaml"  # SaveConfigCallback's copy, beside checkpoints/
                args = ["test", "--config", str(saved), "--config", str(config), f"--ckpt_path={best}"]
                runner([*args, f"--trainer.default_root_dir={test_dir}"])
    return runs


def subprocess_runner(launcher: Sequence[str]) -> Runner:
    """Runs each command as ``launcher + args`` in a new process, stopping at the first failure."""

    def run(args: list[str]) -> object:
        command = [*launcher, *args]
        print("[run_scenario] " + shlex.join(command), file=sys.stderr, flush=True)
        return subprocess.run(command, check=True)

    return run


def main(argv: list[str] | None = None) -> int:
    """Parse the options (see the module docstring) and run the scenario."""
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", type=Path, required=True, help="configs/data/<dataset>_<ways>w<shots>s.yaml")
    parser.add_argument("--model", type=Path, required=True, help="configs/models/<algorithm>_<backbone>.yaml")
    parser.add_argument("--trainer", type=Path, nargs="*", default=[], help="configs/trainer/*.yaml (optional)")
    parser.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=["baseline", *SCHEMES, *CONFIGS])
    parser.add_argument("--online", action="store_true", help="also run every scheme online")
    parser.add_argument("--online-only", action="store_true", help="run the schemes online only (no reference)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--cross-domain", type=Path, nargs="*", default=[], help="e.g. configs/data/cub200.yaml")
    parser.add_argument("--task-sampling", nargs="+", default=[], choices=TASK_SAMPLERS, help="also with these")
    parser.add_argument("--out", type=Path, default=Path("runs"))
    parser.add_argument("--launcher", default=f"{shlex.quote(sys.executable)} -m lightning_episodes")
    parser.add_argument("--dry-run", action="store_true", help="print the commands instead of running them")
    args = parser.parse_args(argv)
    launcher = shlex.split(args.launcher)
    runner: Runner = (lambda a: print(shlex.join([*launcher, *a]))) if args.dry_run else subprocess_runner(launcher)
    try:
        run_scenario(args.data, args.model, args.out, runner, args.trainer, args.schemes,
                     args.online or args.online_only, args.seeds, not args.online_only, args.cross_domain, extra,
                     args.dry_run, args.task_sampling)  # fmt: skip
    except (FileNotFoundError, subprocess.CalledProcessError) as error:
        print(f"[run_scenario] {error}", file=sys.stderr)
        return 1
    print(f"[run_scenario] table: lightning-episodes report {args.out / f'{args.data.stem}__{args.model.stem}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
