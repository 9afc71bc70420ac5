"""Every YAML file of ``configs/`` parses through the real CLI, composes with every other group, and a few
compositions train and test end to end on tiny fabricated datasets in the real on-disk formats.

The groups, found by globbing (new files are picked up as they appear), compose in the documented order::

    fit --config configs/data/X --config configs/models/Y [--config configs/trainer/T ...] --config configs/sampling/Z

Why parsing each file once is enough for every combination: jsonargparse validates each key against the class its
``class_path`` selects, and the groups own disjoint keys (checked below for every combination: data files set
``data``, the schedule and the seed; model files ``model``; sampling files only ``trainer.callbacks``, a list that a
later file would replace; trainer files other ``trainer`` keys, overriding a data file's schedule on purpose). So
a combination parses if each of its files parses in some composition. ``LIGHTNING_EPISODES_ALL_CONFIGS=1`` also
parses the whole product (about a second per combination on a loaded 2-core machine).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import io
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
DATA = sorted(CONFIGS.glob("data/*.yaml"))
MODELS = sorted(CONFIGS.glob("models/*.yaml"))
SAMPLING = sorted(CONFIGS.glob("sampling/*.yaml"))
TASK_SAMPLING = sorted(CONFIGS.glob("task_sampling/*.yaml"))  # data.task_sampler alone: composes with a SAMPLING file
#: a regulariser each (weight decay, label smoothing, augmentation, task interpolation): after the data and model
#: files, whose one setting it changes on purpose (a data file's augment, a model's optimiser weight decay)
REGULARIZATION = sorted(CONFIGS.glob("regularization/*.yaml"))
TRAINER = sorted(CONFIGS.glob("trainer/*.yaml"))
STANDALONE = sorted(CONFIGS.glob("*.yaml"))  # the quickstart: data, model, trainer and callbacks in one file
GROUPS = {"data", "models", "sampling", "task_sampling", "regularization", "trainer"}
#: Files in other folders (e.g. configs/feat/): protocols that patch a model file's arguments, or that set a model.
OTHERS = sorted(p for p in CONFIGS.glob("*/*.yaml") if p.parent.name not in GROUPS)
#: Data files of the paper's scenarios (the others are cross-domain patches or the embedded dataset).
PAPER_DATA = {"mini_imagenet": 16, "tiered_imagenet": 32}
SCHEDULE = {"max_steps", "val_check_interval", "check_val_every_n_epoch"}


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def leaves(tree: Any, prefix: str = "") -> Iterator[str]:
    """Dotted keys of the leaves of a YAML tree (lists and class_path/init_args subtrees are leaves of their key)."""
    if isinstance(tree, dict) and tree:
        for key, value in tree.items():
            yield from leaves(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip(".")


def name(path: Path) -> str:
    return str(path.relative_to(CONFIGS))


# -- structure: cheap, over every combination -------------------------------------------------------------------
def test_the_groups_exist() -> None:
    assert DATA
    assert MODELS
    assert SAMPLING
    assert TRAINER
    assert {p.stem for p in DATA} >= {f"{d}_5w{s}s" for d in (*PAPER_DATA, "glyphs") for s in (1, 5)}
    assert {p.stem for p in DATA} >= {"cub200", "dtd", "fgvc_aircraft", "vgg_flowers"}
    assert {p.stem for p in MODELS} >= {
        f"protonet_{d}_{b}" for d in ("euclidean", "cosine") for b in ("conv4", "resnet12")
    }


@pytest.mark.parametrize("path", DATA, ids=name)
def test_data_files_set_data_schedule_and_seed_only(path: Path) -> None:
    config = load(path)
    assert set(config) <= {"data", "trainer", "seed_everything"}
    assert set(config.get("trainer", {})) <= SCHEDULE


@pytest.mark.parametrize("path", MODELS, ids=name)
def test_model_files_set_the_model_only(path: Path) -> None:
    config = load(path)
    assert set(config) == {"model"}
    assert "class_path" in config["model"]


@pytest.mark.parametrize("path", SAMPLING, ids=name)
def test_sampling_files_set_the_callbacks_only(path: Path) -> None:
    assert list(leaves(load(path))) == ["trainer.callbacks"]


@pytest.mark.parametrize("path", TRAINER, ids=name)
def test_trainer_files_set_no_lists(path: Path) -> None:
    config = load(path)
    assert set(config) <= {"trainer"}
    assert "callbacks" not in config["trainer"]


def test_every_combination_has_disjoint_groups() -> None:
    """Only a trainer file may override another group's key (the schedule of a data file), and only on purpose."""
    keys = {
        path: set(leaves(load(path))) for path in [*DATA, *MODELS, *SAMPLING, *TASK_SAMPLING, *REGULARIZATION, *TRAINER]
    }
    for data, model, sampling in itertools.product(DATA, MODELS, SAMPLING):
        assert not keys[data] & keys[model], (data, model)
        assert not (keys[data] | keys[model]) & keys[sampling], (data, model, sampling)
    for tasks, other in itertools.product(TASK_SAMPLING, [*DATA, *MODELS, *SAMPLING, *TRAINER]):
        assert all(key.startswith("data.init_args.task_sampler.") for key in keys[tasks]), tasks
        assert not keys[tasks] & keys[other], (tasks, other)
    for regularization, other in itertools.product(REGULARIZATION, [*SAMPLING, *TASK_SAMPLING, *TRAINER]):
        assert not keys[regularization] & keys[other], (regularization, other)
    for trainer, other in itertools.product(TRAINER, [*MODELS, *SAMPLING]):
        assert not keys[trainer] & keys[other], (trainer, other)
    for trainer, data in itertools.product(TRAINER, DATA):
        assert keys[trainer] & keys[data] <= {f"trainer.{key}" for key in SCHEDULE}, (trainer, data)


@pytest.mark.parametrize("path", [p for p in DATA if p.stem.rsplit("_", 1)[0] in PAPER_DATA], ids=name)
def test_the_papers_protocol(path: Path) -> None:
    config = load(path)
    data = config["data"]["init_args"]
    ways, shots = int(path.stem[-4]), int(path.stem[-2])
    assert (data["ways"], data["shots"], data["queries"]) == (ways, shots, 15)
    assert data["episodes_per_batch"] == PAPER_DATA[path.stem.rsplit("_", 1)[0]]
    assert (data["val_episodes"], data["test_episodes"]) == (1000, 1000)
    assert (data["image_size"], data["channels"], data["augment"]) == (84, 3, False)
    assert config["trainer"] == {"max_steps": 20000, "val_check_interval": 1000, "check_val_every_n_epoch": None}


@pytest.mark.parametrize("path", [p for p in MODELS if p.stem.startswith("protonet_")], ids=name)
def test_protonet_models(path: Path) -> None:
    _, distance, backbone = path.stem.split("_")
    model = load(path)["model"]
    assert model["class_path"] == "lightning_episodes.algorithms.ProtoNet"
    assert (model["init_args"]["distance"], model["init_args"]["backbone"]) == (distance, backbone)
    assert model["init_args"]["optimizer"] == {"class_path": "torch.optim.Adam", "init_args": {"lr": 0.001}}


# -- parsing through the real CLI -------------------------------------------------------------------------------
class _Parsed(Exception):
    pass


@pytest.fixture(scope="module")
def parser() -> Any:
    """The CLI's own parser, built once (building it costs about as much as parsing ten configs)."""
    from lightning_episodes.algorithms.base import EpisodicModule
    from lightning_episodes.cli import EpisodicCLI
    from lightning_episodes.data.datamodule import EpisodicDataModule

    class ParserOnly(EpisodicCLI):
        def parse_arguments(self, parser: Any, args: Any) -> None:
            raise _Parsed(parser)

    with pytest.raises(_Parsed) as built:
        ParserOnly(
            EpisodicModule,
            EpisodicDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            auto_configure_optimizers=False,
            args=[],
        )
    return built.value.args[0]


def parse(parser: Any, *files: Path, subcommand: str = "fit", extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """What ``<subcommand> --config F1 --config F2 ... --print_config`` prints, as a dict."""
    args = [subcommand, *itertools.chain.from_iterable(("--config", str(f)) for f in files), *extra]
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            parsed = parser.parse_args(args)
    except SystemExit:
        raise AssertionError(f"{' '.join(args)}\n{errors.getvalue()}") from None
    return yaml.safe_load(parser.dump(parsed))[subcommand]


def model_for(patch: Path) -> list[Path]:
    """The model files a protocol file can patch: those that set every model argument it sets, else those whose
    class takes every argument it sets (e.g. ``configs/study`` sets ``backbone_options`` of the ProtoNet files)."""
    wanted = set(load(patch).get("model", {}).get("init_args", {}))
    if not wanted or "class_path" in load(patch).get("model", {}):
        return []
    setting = [m for m in MODELS if wanted <= set(load(m)["model"].get("init_args", {}))]
    return setting or [m for m in MODELS if wanted <= accepted_arguments(model_class(m))]


def accepted_arguments(cls: type) -> set[str]:
    """The arguments a model class takes: its own and, through ``**kwargs``, those of every base up the MRO."""
    return {
        name for c in cls.__mro__ if "__init__" in vars(c) for name in inspect.signature(vars(c)["__init__"]).parameters
    }


def model_class(path: Path) -> type:
    module, _, name = load(path)["model"]["class_path"].rpartition(".")
    return getattr(importlib.import_module(module), name)


def compositions() -> list[tuple[Path, ...]]:
    """Every file at least once, each in a full composition; other folders after the model they patch."""
    size = max(len(DATA), len(MODELS), len(SAMPLING), len(TRAINER))
    found: list[tuple[Path, ...]] = []
    for i in range(size):
        trainer = (TRAINER[i],) if i < len(TRAINER) else ()
        found.append((DATA[i % len(DATA)], MODELS[i % len(MODELS)], *trainer, SAMPLING[i % len(SAMPLING)]))
    found += [(path,) for path in STANDALONE] + [(STANDALONE[0], SAMPLING[-1])] * bool(STANDALONE)
    found += [
        (DATA[i % len(DATA)], MODELS[i % len(MODELS)], path, SAMPLING[0]) for i, path in enumerate(REGULARIZATION)
    ]
    for other in OTHERS:
        bases = model_for(other)
        found.append((*bases[:1], other, SAMPLING[0]) if bases or "model" not in load(other) else (other,))
    return found


@pytest.mark.parametrize("files", compositions(), ids=lambda files: "+".join(name(f) for f in files))
def test_every_file_parses_in_a_composition(parser: Any, files: tuple[Path, ...]) -> None:
    config = parse(parser, *files)
    assert config["model"]["class_path"]
    assert config["data"]["class_path"]


def test_other_folders_know_their_model() -> None:
    for other in OTHERS:
        config = load(other)
        assert "class_path" in config.get("model", {}) or not config.get("model") or model_for(other), other


@pytest.mark.skipif(not os.environ.get("LIGHTNING_EPISODES_ALL_CONFIGS"), reason="set LIGHTNING_EPISODES_ALL_CONFIGS=1")
def test_the_whole_product_parses(parser: Any) -> None:
    for data, model, sampling in itertools.product(DATA, MODELS, SAMPLING):
        for trainer in [(), *((t,) for t in TRAINER)]:
            parse(parser, data, model, *trainer, sampling)


def test_a_paper_cell_prints_its_config() -> None:
    """The command of the docs, through ``main`` and ``--print_config`` (the groups really compose)."""
    from lightning_episodes.cli import main

    files = ["data/mini_imagenet_5w5s.yaml", "models/protonet_euclidean_conv4.yaml", "sampling/uniform_online.yaml"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(SystemExit) as exit_info:
        main(["fit", *itertools.chain.from_iterable(("--config", str(CONFIGS / f)) for f in files), "--print_config"])
    assert exit_info.value.code in (0, None)
    config = yaml.safe_load(printed.getvalue())
    data, trainer = config["data"]["init_args"], config["trainer"]
    assert (data["dataset"], data["shots"], data["episodes_per_batch"], data["image_size"]) == (
        "mini-imagenet",
        5,
        16,
        84,
    )
    assert (trainer["max_steps"], trainer["val_check_interval"], config["seed_everything"]) == (20000, 1000, 0)
    checkpoint, weighting = trainer["callbacks"]
    assert checkpoint["init_args"]["monitor"] == "val/acc"
    assert (weighting["init_args"]["target"], weighting["init_args"]["estimate"]) == ("uniform", "online")
    assert config["model"]["init_args"]["distance"] == "euclidean"
    assert "in_channels" not in config["model"]["init_args"]  # linked from data.channels


def test_a_cross_domain_patch_keeps_the_runs_episodes(parser: Any) -> None:
    base = (CONFIGS / "data/mini_imagenet_5w1s.yaml", CONFIGS / "models/protonet_cosine_resnet12.yaml")
    config = parse(parser, *base, CONFIGS / "data/cub200.yaml", subcommand="test")
    data = config["data"]["init_args"]
    assert (data["dataset"], data["shots"], data["image_size"], data["channels"]) == ("cub200", 1, 84, 3)
    assert data["test_episodes"] == 1000


# -- end to end on fabricated datasets --------------------------------------------------------------------------
def _load_script() -> Any:
    path = CONFIGS.parent / "scripts" / "run_scenario.py"
    spec = importlib.util.spec_from_file_location("run_scenario", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_seeded_online_only_campaign_plans_its_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = _load_script()
    data, model = CONFIGS / "data/glyphs_5w1s.yaml", CONFIGS / "models/protonet_euclidean_conv4.yaml"
    argv = ["--data", str(data), "--model", str(model), "--schemes", "uniform", "--online-only", "--seeds", "3", "4"]
    assert script.main([*argv, "--out", str(tmp_path), "--dry-run", "--", "--trainer.max_steps=7"]) == 0
    commands = [line.split() for line in capsys.readouterr().out.splitlines() if " fit " in line]
    runs = [f"seed{s}/{scheme}_online" for s in (3, 4) for scheme in ("baseline", "uniform")]
    assert [c[-2] for c in commands] == ["--test_after_fit=true"] * 4
    for command, run in zip(commands, runs, strict=True):
        seed = run[4]
        # each seed: its own initialisation and training episodes, the data config's fixed evaluation episodes
        assert f"--seed_everything={seed}" in command
        assert f"--data.train_seed={seed}" in command
        assert not any(a.startswith("--data.seed") for a in command)
        assert any(a.endswith(f"{run}") and a.startswith("--trainer.default_root_dir=") for a in command)
        assert command[-1] == "--trainer.max_steps=7"
        assert not any("reference_checkpoint" in a or "offline" in a for a in command)


#: Tiny episodes and a short schedule on top of any composition (the datasets have 3 images per class).
TINY = (
    "--data.image_size=16",
    "--data.queries=2",
    "--data.episodes_per_batch=2",
    "--data.val_episodes=4",
    "--data.test_episodes=4",
    "--trainer.max_steps=4",
    "--trainer.val_check_interval=2",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The dirpath has changed")  # a checkpoint tested from another folder: expected
def test_a_scenario_baseline_offline_cross_domain_and_report(tmp_path: Path) -> None:
    from lightning_episodes.analysis.report import build_table, find_results, read_result
    from lightning_episodes.cli import main
    from tests.data.fabricate import write_cub200, write_mini_imagenet

    root = tmp_path / "datasets"
    write_mini_imagenet(root, per_class=3)
    write_cub200(root, per_class=3)
    commands: list[list[str]] = []

    def runner(args: list[str]) -> None:
        commands.append(args)
        main(args)

    script = _load_script()
    extra = (f"--data.root={root}", *TINY, "--trainer.callbacks.offline_episodes=4")
    runs = script.run_scenario(
        CONFIGS / "data/mini_imagenet_5w1s.yaml",
        CONFIGS / "models/protonet_euclidean_conv4.yaml",
        tmp_path / "runs",
        runner,
        trainer=[CONFIGS / "trainer/smoke.yaml"],
        schemes=["uniform"],
        cross_domain=[CONFIGS / "data/cub200.yaml"],
        extra=extra,
    )
    baseline, uniform = runs
    assert [c[0] for c in commands] == ["fit", "fit", "test", "test"]
    # the offline run's reference is the baseline's best checkpoint
    reference = next(a for a in commands[1] if a.startswith("--trainer.callbacks.reference_checkpoint="))
    assert Path(reference.split("=", 1)[1]) == script.best_checkpoint(baseline)
    assert "checkpoints/best-" in reference

    table = build_table(read_result(path) for path in find_results([tmp_path / "runs"]))
    assert [(row.algorithm, row.scheme) for row in table.rows] == [
        ("ProtoNet (Euclidean)", "baseline"),
        # the smoke setting's offline_episodes is not the callback's default: the row names it
        ("ProtoNet (Euclidean)", "uniform (offline, offline_episodes=4)"),
    ]
    assert [column.label for column in table.columns] == [
        "Mini-ImageNet, Conv-4, 5-way 1-shot",
        "CUB-200, Conv-4, 5-way 1-shot",
    ]
    assert len(table.cells) == 4
    assert all(cell.episodes == 4 for cell in table.cells.values())
    # a second call finds every run done and runs nothing
    commands.clear()
    script.run_scenario(
        CONFIGS / "data/mini_imagenet_5w1s.yaml",
        CONFIGS / "models/protonet_euclidean_conv4.yaml",
        tmp_path / "runs",
        runner,
        schemes=["uniform"],
        cross_domain=[CONFIGS / "data/cub200.yaml"],
    )
    assert commands == []
    record = json.loads(next((uniform / "cross_domain").rglob("test_results.json")).read_text())
    assert record["data"]["dataset"] == "cub200"


@pytest.mark.slow
def test_tiered_resnet12_cosine_curriculum(tmp_path: Path) -> None:
    from lightning_episodes.cli import main
    from tests.data.fabricate import write_tiered_imagenet

    write_tiered_imagenet(tmp_path / "datasets", per_class=3)
    files = [
        "data/tiered_imagenet_5w5s.yaml",
        "models/protonet_cosine_resnet12.yaml",
        "sampling/curriculum_online.yaml",
    ]
    args = [*itertools.chain.from_iterable(("--config", str(CONFIGS / f)) for f in files), *TINY]
    args += [f"--data.root={tmp_path / 'datasets'}", "--data.shots=1", f"--trainer.default_root_dir={tmp_path}"]
    main(["fit", *args, "--trainer.callbacks.warmup_steps=2", "--test_after_fit=true"])
    record = json.loads(next(tmp_path.rglob("test_results.json")).read_text())
    assert record["hparams"]["distance"] == "cosine"
    assert record["hparams"]["backbone"] == "resnet12"
    assert record["data"]["dataset"] == "tiered-imagenet"
    assert record["episodes"] == 4
    saved = load(next(tmp_path.rglob("config.yaml")))
    assert saved["trainer"]["callbacks"][-1]["init_args"]["target"] == "curriculum"
