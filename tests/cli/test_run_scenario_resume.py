"""scripts/run_scenario.py resumes a run that was stopped during its fit (a last.ckpt, no test record) with
``--ckpt_path last``, skips a finished one and starts a new one from scratch."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
run_scenario = runpy.run_path(str(ROOT / "scripts" / "run_scenario.py"))["run_scenario"]


def test_a_stopped_run_resumes_a_finished_one_is_skipped_and_a_new_one_starts(tmp_path: Path) -> None:
    data, model = ROOT / "configs/data/glyphs_5w1s.yaml", ROOT / "configs/models/protonet_euclidean_conv4.yaml"
    seed = tmp_path / f"{data.stem}__{model.stem}" / "seed0"
    stopped = seed / "baseline_online" / "lightning_logs" / "version_0" / "checkpoints"
    stopped.mkdir(parents=True)
    (stopped / "last.ckpt").write_bytes(b"")
    done = seed / "easy_online" / "lightning_logs" / "version_0"
    (done / "checkpoints").mkdir(parents=True)
    (done / "checkpoints" / "last.ckpt").write_bytes(b"")
    (done / "test_results.json").write_text("{}")
    commands: list[list[str]] = []
    run_scenario(data, model, tmp_path, commands.append, schemes=["uniform", "easy"], online=True, offline=False)
    runs = {next(a for a in c if a.startswith("--trainer.default_root_dir=")).rsplit("/", 1)[1]: c for c in commands}
    assert set(runs) == {"baseline_online", "uniform_online"}  # easy_online is done
    assert "--ckpt_path=last" in runs["baseline_online"]
    assert not any(a.startswith("--ckpt_path") for a in runs["uniform_online"])


def test_a_scheme_named_by_its_sampling_config_runs_that_config_once_beside_the_targets(tmp_path: Path) -> None:
    data, model = ROOT / "configs/data/glyphs_5w1s.yaml", ROOT / "configs/models/protonet_euclidean_conv4.yaml"
    commands: list[list[str]] = []
    schemes = ["uniform", "uniform_online_psis", "uniform_online_placebo"]
    run_scenario(data, model, tmp_path, commands.append, schemes=schemes, online=True, offline=False)
    runs = {next(a for a in c if a.startswith("--trainer.default_root_dir=")).rsplit("/", 1)[1]: c for c in commands}
    assert list(runs) == ["baseline_online", "uniform_online", "uniform_online_psis", "uniform_online_placebo"]
    for name, command in runs.items():
        configs = [command[i + 1] for i, a in enumerate(command) if a == "--config"]
        assert Path(configs[-1]) == ROOT / "configs" / "sampling" / f"{name}.yaml"
        assert not any(a.startswith("--trainer.callbacks.reference_checkpoint") for a in command)


def test_an_offline_config_scheme_gets_the_baselines_best_checkpoint_as_its_reference(tmp_path: Path) -> None:
    data, model = ROOT / "configs/data/glyphs_5w1s.yaml", ROOT / "configs/models/protonet_euclidean_conv4.yaml"
    commands: list[list[str]] = []
    run_scenario(data, model, tmp_path, commands.append, schemes=["uniform_offline"], dry_run=True)
    (offline,) = (c for c in commands if any(a.endswith("/seed0/uniform_offline") for a in c))
    assert any(a.startswith("--trainer.callbacks.reference_checkpoint=<best checkpoint of") for a in offline)


def test_the_baseline_scheme_runs_the_baseline_alone_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main = runpy.run_path(str(ROOT / "scripts" / "run_scenario.py"))["main"]
    data, model = "configs/data/glyphs_5w1s.yaml", "configs/models/protonet_euclidean_conv4.yaml"
    argv = ["--data", data, "--model", model, "--schemes", "baseline", "--online-only", "--seeds", "0", "1"]
    assert main([*argv, "--out", str(tmp_path), "--dry-run", "--", "--data.train_images_per_class", "30"]) == 0
    commands = [line for line in capsys.readouterr().out.splitlines() if " fit " in line]
    assert [c.split("--trainer.default_root_dir=")[1].split()[0].rsplit("/", 2)[1:] for c in commands] == [
        ["seed0", "baseline_online"],
        ["seed1", "baseline_online"],
    ]
    assert all(c.endswith("--data.train_images_per_class 30") for c in commands)


def test_a_task_sampler_runs_every_scheme_again_beside_the_plain_runs(tmp_path: Path) -> None:
    data, model = ROOT / "configs/data/glyphs_5w1s.yaml", ROOT / "configs/models/protonet_euclidean_conv4.yaml"
    commands: list[list[str]] = []
    samplers = ["adaptive", "hard_task_mining"]
    run_scenario(
        data, model, tmp_path, commands.append, schemes=["uniform_offline"], dry_run=True, task_sampling=samplers
    )
    runs = {next(a for a in c if a.startswith("--trainer.default_root_dir=")).rsplit("/", 1)[1]: c for c in commands}
    assert list(runs) == [
        "baseline_online", "uniform_offline",
        "baseline_online__adaptive", "uniform_offline__adaptive",
        "baseline_online__hard_task_mining", "uniform_offline__hard_task_mining",
    ]  # fmt: skip
    for name, command in runs.items():
        configs = [Path(command[i + 1]) for i, a in enumerate(command) if a == "--config"]
        scheme, _, sampler = name.partition("__")
        assert configs[2] == ROOT / "configs" / "sampling" / f"{scheme}.yaml"
        assert configs[3:] == ([ROOT / "configs" / "task_sampling" / f"{sampler}.yaml"] if sampler else [])
    reference = next(a for a in runs["uniform_offline__adaptive"] if a.startswith("--trainer.callbacks.reference"))
    assert reference.endswith("/seed0/baseline_online>")  # the plain baseline's checkpoint
