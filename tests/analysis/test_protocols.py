"""A report never pools runs trained under different protocols into one cell (a learning-rate schedule, the
backbone's width, the number of steps), and `compare` refuses to pair them; seeds of one protocol stay one cell."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from lightning_episodes.analysis.protocols import class_word, distinguishing_settings, protocol_of, trained_settings
from lightning_episodes.analysis.report import (
    Column,
    Row,
    RunResult,
    build_table,
    distinguish_protocols,
    read_result,
    runs_markdown,
)

STEP = {"class_path": "torch.optim.lr_scheduler.StepLR", "init_args": {"step_size": 1000, "gamma": 0.5}}


def config(seed: int, lr_scheduler: dict[str, Any] | None = None, hidden: int = 32, **data: Any) -> dict[str, Any]:
    model = {"backbone": "conv4", "backbone_options": {"hidden": hidden}, "lr_scheduler": lr_scheduler}
    model |= {"optimizer": {"class_path": "torch.optim.Adam", "init_args": {"lr": 0.001}}, "compile_backbone": False}
    data = {"dataset": "glyphs-100", "ways": 5, "shots": 1, "seed": 0, "train_seed": seed, "num_workers": 0} | data
    return {
        "seed_everything": seed,
        "trainer": {"max_steps": 3000, "val_check_interval": 300, "accelerator": "auto", "callbacks": []},
        "model": {"class_path": "lightning_episodes.algorithms.ProtoNet", "init_args": model},
        "data": {"class_path": "lightning_episodes.data.EpisodicDataModule", "init_args": data},
    }


def write(folder: Path, accuracy: float, cfg: dict[str, Any], algorithm: str = "ProtoNet") -> Path:
    folder.mkdir(parents=True)
    data = cfg["data"]["init_args"]
    hparams = {"backbone": "conv4"} | ({"distance": "euclidean"} if algorithm == "ProtoNet" else {})
    record = {"algorithm": algorithm, "accuracy": accuracy, "ci95": 0.01, "episodes": 1000,
              "hparams": hparams, "seed": cfg["seed_everything"],
              "data": {k: data[k] for k in ("dataset", "ways", "shots", "seed")}}  # fmt: skip
    (folder / "test_results.json").write_text(json.dumps(record))
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
    return folder / "test_results.json"


def test_the_protocol_leaves_out_seeds_workers_and_speed_only_settings() -> None:
    a = protocol_of(config(0, num_workers=0), {})
    b = protocol_of(config(1, num_workers=4) | {"seed_everything": 1}, {})
    assert a == b
    settings = dict(a)
    assert settings["model.backbone_options.hidden"] == "32"
    assert (settings["model.optimizer"], settings["model.optimizer.lr"]) == ("Adam()", "0.001")
    assert settings["model.lr_scheduler"] == "none"
    assert settings["trainer.max_steps"] == "3000"
    assert not {
        "data.seed",
        "data.train_seed",
        "data.num_workers",
        "model.compile_backbone",
        "trainer.accelerator",
    } & set(settings)
    step = {k: v for k, v in protocol_of(config(0, STEP), {}) if k.startswith("model.lr_scheduler")}
    assert step == {
        "model.lr_scheduler": "StepLR()",
        "model.lr_scheduler.gamma": "0.5",
        "model.lr_scheduler.step_size": "1000",
    }


def test_without_a_config_the_record_gives_the_protocol() -> None:
    record = {
        "hparams": {"backbone": "conv4", "_class_path": "x", "channels_last": True},
        "data": {"ways": 5, "seed": 3},
    }
    assert protocol_of(None, record) == (("data.ways", "5"), ("model.backbone", "conv4"))


def test_distinguishing_settings_name_only_what_differs() -> None:
    one = (("model.lr_scheduler", "none"), ("trainer.max_steps", "3000"))
    two = (("model.lr_scheduler", "StepLR()"), ("model.lr_scheduler.step_size", "1000"), ("trainer.max_steps", "3000"))
    three = (("model.lr_scheduler", "none"), ("trainer.max_steps", "3000"), ("data.queries", "15"))
    assert distinguishing_settings([one]) == [""]
    assert distinguishing_settings([one, one]) == ["", ""]
    assert distinguishing_settings([one, two, three]) == [
        "queries=–, lr_scheduler=none",
        "queries=–, lr_scheduler=step",
        "queries=15, lr_scheduler=none",
    ]


def test_settings_are_words_and_a_class_shows_the_arguments_that_tell_it_apart() -> None:
    """``lr_scheduler=cosine``, not the object text ``CosineToZero(last_epoch=-1, max_steps=none, start=0)``; the
    arguments of a class only where two protocols of that class differ in them."""
    cosine = {"class_path": "lightning_episodes.algorithms.schedules.CosineToZero",
              "init_args": {"start": 0, "last_epoch": -1, "max_steps": None}}  # fmt: skip
    step_2000 = {"class_path": STEP["class_path"], "init_args": {"step_size": 2000, "gamma": 0.5}}
    protocols = [protocol_of(config(0, schedule), {}) for schedule in (None, cosine, STEP, step_2000)]
    assert distinguishing_settings(protocols) == [
        "lr_scheduler=none",
        "lr_scheduler=cosine",
        "lr_scheduler=step(step_size=1000)",
        "lr_scheduler=step(step_size=2000)",
    ]
    wider = protocol_of(config(0, cosine, hidden=64), {})
    widths = ["backbone_options.hidden=32", "backbone_options.hidden=64"]
    assert distinguishing_settings([protocols[1], wider]) == widths
    # two classes of one word: their names tell them apart
    other = protocol_of(config(0, {"class_path": "my.schedules.CosineLR"}), {})
    assert distinguishing_settings([protocols[1], other]) == ["lr_scheduler=CosineToZero", "lr_scheduler=CosineLR"]


@pytest.mark.parametrize(
    ("name", "word"),
    [("CosineToZero", "cosine"), ("LinearToZero", "linear"), ("StepLR", "step"), ("MultiStepLR", "multi_step"),
     ("Adam", "adam"), ("SGD", "sgd"), ("ReduceLROnPlateau", "reduce_lr_on_plateau"), ("LR", "lr")],
)  # fmt: skip
def test_class_words(name: str, word: str) -> None:
    assert class_word(name) == word


def test_runs_of_two_schedules_are_two_columns_not_two_seeds(tmp_path: Path) -> None:
    # seed 0 at a constant rate and seed 1 under a step schedule: before, one cell of "2 seeds", mean 50%
    results = [
        read_result(write(tmp_path / "constant" / "seed0", 0.55, config(0))),
        read_result(write(tmp_path / "step" / "seed1", 0.45, config(1, STEP))),
        read_result(write(tmp_path / "step" / "seed2", 0.47, config(2, STEP))),
    ]
    table = build_table(results)
    assert [column.label for column in table.columns] == [
        "Glyphs-100, Conv-4, 5-way 1-shot [lr_scheduler=none]",
        "Glyphs-100, Conv-4, 5-way 1-shot [lr_scheduler=step]",
    ]
    cells = [table.cells[table.rows[0], column] for column in table.columns]
    assert [(cell.seeds, round(cell.mean, 4)) for cell in cells] == [(1, 0.55), (2, 0.46)]
    assert distinguish_protocols(distinguish_protocols(results)) == distinguish_protocols(results)  # idempotent
    assert runs_markdown(results) == ""  # no validation curves recorded: no runs table
    assert "[lr_scheduler=none]" in table.to_markdown()


def test_one_protocol_keeps_one_column_without_a_setting(tmp_path: Path) -> None:
    results = [read_result(write(tmp_path / f"seed{s}", 0.5 + s / 100, config(s, hidden=64))) for s in range(3)]
    table = build_table(results)
    assert [column.label for column in table.columns] == ["Glyphs-100, Conv-4, 5-way 1-shot"]
    assert table.cells[table.rows[0], table.columns[0]].seeds == 3


@pytest.mark.parametrize(
    ("other", "named"), [({"hidden": 64}, "backbone_options.hidden"), ({"lr_scheduler": STEP}, "lr_scheduler")]
)
def test_a_width_or_a_schedule_apart_splits_the_column(tmp_path: Path, other: dict[str, Any], named: str) -> None:
    results = [
        read_result(write(tmp_path / "a", 0.5, config(0))),
        read_result(write(tmp_path / "b", 0.6, config(1, **other))),
    ]
    labels = [column.label for column in build_table(results).columns]
    assert len(labels) == 2
    assert all(f"[{named}=" in label for label in labels)


def test_a_scarce_training_split_is_another_column_named_by_its_size(tmp_path: Path) -> None:
    scarce = config(1, train_images_per_class=20)
    assert protocol_of(scarce, {}) != protocol_of(config(1, train_images_per_class=30), {})
    # every image (the default) is what runs recorded before the option did: one protocol with them
    assert protocol_of(config(0, train_images_per_class=None), {}) == protocol_of(config(0), {})
    assert protocol_of(None, {"data": {"ways": 5, "train_images_per_class": None}}) == (("data.ways", "5"),)
    results = [
        read_result(write(tmp_path / "all" / "seed0", 0.6, config(0))),
        read_result(write(tmp_path / "all" / "seed1", 0.62, config(1, train_images_per_class=None))),
        read_result(write(tmp_path / "scarce" / "seed0", 0.5, config(0, train_images_per_class=20))),
    ]
    table = build_table(results)
    assert [column.label for column in table.columns] == [
        "Glyphs-100, Conv-4, 5-way 1-shot [train_images_per_class=20]",
        "Glyphs-100, Conv-4, 5-way 1-shot [train_images_per_class=–]",
    ]
    assert [table.cells[table.rows[0], column].seeds for column in table.columns] == [1, 2]


def test_a_subset_of_the_training_classes_is_another_column_and_every_class_pairs_with_older_runs(
    tmp_path: Path,
) -> None:
    assert protocol_of(config(0, train_classes=None), {}) == protocol_of(config(0), {})
    assert protocol_of(None, {"data": {"ways": 5, "train_classes": None}}) == (("data.ways", "5"),)
    fraction = protocol_of(config(1, train_classes=0.2), {})
    assert fraction != protocol_of(config(1), {})
    assert ("data.train_classes", "0.2") in fraction
    # a command line parses a count as a float (12.0), a record keeps it as an int: one protocol
    assert protocol_of(config(1, train_classes=12.0), {}) == protocol_of(config(1, train_classes=12), {})
    assert ("data.train_classes", "12") in protocol_of(None, {"data": {"train_classes": 12}})
    assert trained_settings(config(1, train_classes=12.0))["data.train_classes"] == "12"
    assert "data.train_classes" not in trained_settings(config(1, train_classes=None))
    results = [
        read_result(write(tmp_path / "all" / "seed0", 0.6, config(0))),
        read_result(write(tmp_path / "few" / "seed0", 0.5, config(0, train_classes=0.2))),
    ]
    assert [column.label for column in build_table(results).columns] == [
        "Glyphs-100, Conv-4, 5-way 1-shot [train_classes=0.2]",
        "Glyphs-100, Conv-4, 5-way 1-shot [train_classes=–]",
    ]


def test_model_settings_added_later_at_their_default_keep_older_runs_in_the_protocol() -> None:
    """A run recorded before ``backbone_weights`` and ``drop_head`` existed was trained as one at their default
    (``None``): one protocol; a value of either is another."""
    old = config(0)
    new = config(0)
    new["model"]["init_args"] |= {"backbone_weights": None, "drop_head": None}
    assert protocol_of(new, {}) == protocol_of(old, {})
    new["model"]["init_args"]["drop_head"] = "head"
    assert protocol_of(new, {}) != protocol_of(old, {})
    assert protocol_of(None, {"hparams": {"backbone_weights": None}, "data": {"ways": 5}}) == (("data.ways", "5"),)


def test_a_task_sampler_is_a_row_not_a_column(tmp_path: Path) -> None:
    """The classes a task sampler chooses make a scheme of their own (a row), on the benchmark's column: a plain run
    whose config says ``task_sampler: null`` and one recorded before the option existed are one protocol."""
    mining = {"class_path": "lightning_episodes.data.HardTaskMining", "init_args": {"buffer_size": 50}}
    assert protocol_of(config(0, task_sampler=mining), {}) == protocol_of(config(0), {})
    assert protocol_of(config(0, task_sampler=None), {}) == protocol_of(config(0), {})
    assert protocol_of(None, {"data": {"ways": 5, "task_sampler": "HardTaskMining()"}}) == (("data.ways", "5"),)
    plain = write(tmp_path / "plain", 0.6, config(0, task_sampler=None))
    mined = write(tmp_path / "mined", 0.62, config(0, task_sampler=mining))
    record = json.loads(mined.read_text())
    mined.write_text(json.dumps({**record, "data": {**record["data"], "task_sampler": "HardTaskMining()"}}))
    table = build_table([read_result(plain), read_result(mined)])
    assert len(table.columns) == 1
    assert [row.scheme for row in table.rows] == ["baseline", "baseline + HardTaskMining"]


def maml(seed: int, lr_scheduler: dict[str, Any] | None = None) -> dict[str, Any]:
    """MAML's recipe: model settings ProtoNet lacks, and twice the steps."""
    cfg = config(seed, lr_scheduler)
    cfg["model"]["class_path"] = "lightning_episodes.algorithms.MAML"
    cfg["model"]["init_args"] |= {"adaptation_steps": 5, "first_order": False, "eval_batch_norm": "episode"}
    cfg["trainer"]["max_steps"] = 6000
    return cfg


def test_algorithms_with_their_own_recipes_share_the_benchmarks_column(tmp_path: Path) -> None:
    """The paper's table: algorithms are rows of one benchmark column although each has settings of its own (MAML's
    adaptation steps, its steps); only where one algorithm ran under several protocols do the columns split, by the
    settings that differ within it, and the other algorithm's runs sit in the column of their own value."""
    results = [
        read_result(write(tmp_path / "protonet" / "seed0", 0.55, config(0))),
        read_result(write(tmp_path / "protonet" / "seed1", 0.57, config(1))),
        read_result(write(tmp_path / "maml" / "seed0", 0.50, maml(0), algorithm="MAML")),
    ]
    table = build_table(results)
    assert [column.label for column in table.columns] == ["Glyphs-100, Conv-4, 5-way 1-shot"]
    assert [(row.algorithm, table.cells[row, table.columns[0]].seeds) for row in table.rows] == [
        ("ProtoNet (Euclidean)", 2),
        ("MAML", 1),
    ]
    results.append(read_result(write(tmp_path / "protonet_step" / "seed0", 0.45, config(0, STEP))))
    table = build_table(results)
    none, step = (f"Glyphs-100, Conv-4, 5-way 1-shot [lr_scheduler={word}]" for word in ("none", "step"))
    assert [column.label for column in table.columns] == [none, step]
    placed = {(row.algorithm, column.label): cell.seeds for (row, column), cell in table.cells.items()}
    assert placed == {("ProtoNet (Euclidean)", none): 2, ("ProtoNet (Euclidean)", step): 1, ("MAML", none): 1}
    runs = runs_markdown([replace(r, validation=((100, 0.4), (200, 0.5))) for r in results])
    assert "| Glyphs-100, Conv-4, 5-way 1-shot [lr_scheduler=none] | MAML | baseline | 0 |" in runs


SETTINGS = st.fixed_dictionaries(
    {
        "trainer.max_steps": st.sampled_from(["2000", "3000"]),
        "model.lr_scheduler": st.sampled_from(["none", "StepLR()"]),
    }
)


@given(st.lists(st.tuples(st.sampled_from(["ProtoNet", "MAML"]), SETTINGS, st.booleans()), min_size=1, max_size=8))
def test_a_column_never_holds_two_protocols_of_one_algorithm(runs: list[tuple[str, dict[str, str], bool]]) -> None:
    """Whatever the runs, two of one algorithm in one column were trained alike (a cell pools seeds, never
    protocols), and runs trained alike share a column."""
    results = []
    for i, (algorithm, settings, extra) in enumerate(runs):
        protocol = dict(settings) | ({"model.adaptation_steps": "5"} if algorithm == "MAML" and extra else {})
        results.append(
            RunResult(
                path=Path(f"run{i}"),
                row=Row(algorithm, "baseline"),
                column=Column("glyphs-100", "conv4", 5, 1),
                accuracy=0.5,
                ci95=0.01,
                episodes=100,
                protocol=tuple(sorted(protocol.items())),
            )  # fmt: skip
        )
    placed = distinguish_protocols(results)
    for a in placed:
        for b in placed:
            if a.row.algorithm == b.row.algorithm:
                assert (a.column == b.column) == (a.protocol == b.protocol)


def test_trained_settings_are_the_protocols_model_and_data_with_the_classes_and_the_task_sampler() -> None:
    """What a run trains (the command line's ``--ckpt_path best|last`` picks a run of the same): the classes and the
    task sampler too, not the seeds, the evaluation's episodes nor the Trainer (its length)."""
    mining = {"class_path": "lightning_episodes.data.HardTaskMining", "init_args": {"hard_fraction": 0.5}}
    base = trained_settings(config(seed=0))
    assert base["model"] == "ProtoNet()"
    assert base["data"] == "EpisodicDataModule()"
    assert not any(key.startswith("trainer") or "seed" in key for key in base)
    evaluation = config(seed=3, test_episodes=20, eval_ways=10, val_episodes=50)
    evaluation["trainer"]["max_steps"] = 9
    assert trained_settings(evaluation) == base
    sampled = trained_settings(config(seed=0, task_sampler=mining))
    assert sampled["data.task_sampler"] == "HardTaskMining()"
    assert sampled["data.task_sampler.hard_fraction"] == "0.5"
    assert dict(protocol_of(config(seed=0, task_sampler=mining), {})) == dict(protocol_of(config(seed=0), {}))
    weighting = {"class_path": "lightning_episodes.callbacks.DifficultyWeightingCallback", "init_args": {"seed": 1}}
    weighting["init_args"]["target"] = "uniform"
    with_callback = trained_settings(config(seed=0), [weighting])
    assert with_callback == {**base, "trainer.callbacks.0": "DifficultyWeightingCallback()",
                             "trainer.callbacks.0.target": "uniform"}  # fmt: skip
