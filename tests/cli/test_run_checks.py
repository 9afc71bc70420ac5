"""What the command line checks and reports around a run: the batch and the fixed episodes divide among the devices
before any process starts, an absent accelerator is one line, a standalone test records its checkpoint's step, a
resumed run's progress bar shows its version number, a checkpoint of another algorithm than --model is said in one
line, and a batch of episodes larger than the available memory stops the run before its folder."""

from __future__ import annotations

import json
import logging
import re
import warnings
from pathlib import Path

import pytest
import torch
from pytorch_lightning.callbacks.progress.progress_bar import get_standard_metrics

from lightning_episodes import cli_checks
from lightning_episodes.cli import entry, main
from tests.cli.test_checkpoints import _config


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr().err
    assert "Traceback" not in captured
    (line,) = [line for line in captured.splitlines() if ": error: " in line]
    return line


def test_a_batch_that_does_not_divide_among_the_devices_stops_before_they_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(_config(tmp_path))
    args = ["--trainer.accelerator=cpu", "--trainer.devices=3", "--trainer.strategy=ddp_fork"]
    assert entry(["fit", "--config", config, *args]) == 2
    line = _error_line(capsys)
    assert line.endswith("error: data.episodes_per_batch=4 must be divisible by the number of devices (3): it is the "
                         "global batch and every device takes an equal slice")  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]  # no run folder


def test_fewer_fixed_episodes_than_devices_stop_before_they_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each device evaluates its share of the fixed episodes (a loader with a length: Lightning refuses an empty
    one)."""
    config = str(_config(tmp_path))
    args = ["--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp_fork", "--data.test_episodes=1"]
    assert entry(["fit", "--config", config, *args]) == 2
    assert _error_line(capsys).endswith(
        "error: data.test_episodes=1 must be >= the number of devices (2): every device evaluates its share of the "
        "fixed episodes"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]  # no run folder


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("accelerator", ["gpu", "cuda", "mps"])
def test_an_absent_accelerator_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], accelerator: str
) -> None:
    assert entry(["fit", "--config", str(_config(tmp_path)), f"--trainer.accelerator={accelerator}"]) == 2
    kind = "MPS" if accelerator == "mps" else "CUDA"
    assert _error_line(capsys).endswith(
        f"error: --trainer.accelerator {accelerator}: this machine has no {kind} device (available: cpu; auto picks "
        "the best of them)"
    )


@pytest.mark.slow
def test_a_standalone_test_records_the_checkpoint_step_and_a_resume_shows_its_version(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = str(_config(tmp_path))
    main(["fit", "--config", config, "--trainer.max_steps=4"])
    cli = main(["test", "--config", config, "--ckpt_path", "last"])
    record = json.loads((Path(cli.trainer.log_dir) / "test_results.json").read_text())
    assert record["global_step"] == 4

    resumed = main(["fit", "--config", config, "--trainer.max_steps=6", "--ckpt_path", "last"], run=True)
    assert resumed.trainer.logger.version == 0  # the run folder version_0, as a number
    assert get_standard_metrics(resumed.trainer)["v_num"] == 0  # was "on_0" (the last 4 characters of "version_0")

    # a checkpoint of ProtoNet tested with another --model: it runs as ProtoNet, and says so
    with caplog.at_level(logging.INFO):
        tested = main(["test", "--config", config, "--model=lightning_episodes.algorithms.MAML", "--ckpt_path",
                       str(tmp_path / "logs/version_0/checkpoints/last.ckpt")])  # fmt: skip
    assert type(tested.model).__name__ == "ProtoNet"
    notes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("note: ")]
    assert notes == [
        f"note: --ckpt_path {tmp_path}/logs/version_0/checkpoints/last.ckpt holds a ProtoNet model: test runs "
        "ProtoNet, not MAML"
    ]


def test_a_batch_larger_than_the_memory_stops_before_the_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 60: ``--data.ways 500`` of the quickstart ran 6 minutes before the kernel killed it for memory."""
    monkeypatch.setattr(cli_checks, "available_memory", lambda device: 2**19)  # a training batch needs 1.2 MiB
    assert entry(["fit", "--config", str(_config(tmp_path)), "--data.queries=4"]) == 2
    line = _error_line(capsys)
    assert re.search(
        r"error: a batch of episodes needs about \d\.\d MiB in training \(data\.ways 5 x \(shots 2 \+ queries 4\) "
        r"images x episodes_per_batch 4, Conv4 activations\), more than the 0\.5 MiB available on cpu; lower "
        r"data\.ways, data\.queries or data\.episodes_per_batch$",
        line,
    ), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]  # no run folder


def test_an_evaluation_batch_is_checked_by_test_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_checks, "available_memory", lambda device: 2**18)  # an evaluation batch needs 0.6 MiB
    assert entry(["test", "--config", str(_config(tmp_path))]) == 2
    assert "MiB in evaluation (data.eval_ways 5 x (eval_shots 2 + eval_queries 3) images x " in _error_line(capsys)


def test_a_batch_near_the_available_memory_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli = main(["--config", str(_config(tmp_path))], run=False)
    needs = {True: 9 * 2**30, False: 2**30}  # training, evaluation
    monkeypatch.setattr(cli_checks, "episode_batch_bytes", lambda model, shape, training, *args: needs[training])
    monkeypatch.setattr(cli_checks, "available_memory", lambda device: 10 * 2**30)
    with pytest.warns(UserWarning, match=r"needs about 9\.0 GiB in training .*: 90% of the 10\.0 GiB available on cpu"):
        cli_checks.check_memory(cli.trainer, cli.model, cli.datamodule, "fit")
    monkeypatch.setattr(cli_checks, "available_memory", lambda device: 12 * 2**30)  # 75%: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cli_checks.check_memory(cli.trainer, cli.model, cli.datamodule, "fit")


def test_a_mixed_precision_is_refused_only_when_its_lower_bound_does_not_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``bf16-mixed`` needs between ``bf16-true``'s memory and float32's (the dry run cannot autocast): a batch that
    fits in the first is a warning, not a refusal of a run that would fit."""
    cli = main(["--config", str(_config(tmp_path)), "--trainer.precision=bf16-mixed"], run=False)
    needs = {("bf16-true", True): 5 * 2**30, ("bf16-mixed", True): 9 * 2**30}
    estimate = lambda model, shape, training, device, precision: needs.get((precision, training), 2**20)  # noqa: E731
    monkeypatch.setattr(cli_checks, "episode_batch_bytes", estimate)
    monkeypatch.setattr(cli_checks, "available_memory", lambda device: 6 * 2**30)
    bounds = r"needs between 5\.0 GiB \(bf16-true\) and 9\.0 GiB \(float32\) in training "
    with pytest.warns(UserWarning, match=bounds + r".*: up to 150% of the 6\.0 GiB available on cpu, which leaves"):
        cli_checks.check_memory(cli.trainer, cli.model, cli.datamodule, "fit")
    monkeypatch.setattr(cli_checks, "available_memory", lambda device: 4 * 2**30)
    with pytest.raises(ValueError, match=bounds + r".*, more than the 4\.0 GiB available on cpu; lower data\.ways"):
        cli_checks.check_memory(cli.trainer, cli.model, cli.datamodule, "fit")


AVX2_ONLY = "model name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx2 fma\n"
ARM_WITHOUT_BF16 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes crc32\nCPU implementer\t: 0x41\n"
WITH_AMX = "model name\t: Intel(R) Xeon(R) Gold 6430\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_bfloat16_on_a_cpu_without_its_instructions_is_one_warning(tmp_path: Path, precision: str) -> None:
    """Emulated bfloat16 costs several times float32's step (6-9x for a conv4 on an AVX2 EPYC): said before the run,
    naming the option, the processor and the setting that is fastest there."""
    cli = main(["--config", str(_config(tmp_path)), f"--trainer.precision={precision}"], run=False)
    with pytest.warns(UserWarning, match="bfloat16") as caught:
        cli_checks.check_precision(cli.trainer, AVX2_ONLY)
    (message,) = [str(w.message) for w in caught]
    assert message == (
        f"--trainer.precision {precision}: this CPU (AMD EPYC 7B13 [avx2]) has no bfloat16 instructions (AVX-512 BF16 "
        "or AMX), so PyTorch emulates them and a step takes several times float32's; --trainer.precision 32-true "
        "--model.channels_last true is the fastest setting here"
    )
    with pytest.warns(UserWarning, match="bfloat16") as caught:  # an Arm CPU before v8.6: its own extension's name
        cli_checks.check_precision(cli.trainer, ARM_WITHOUT_BF16)
    (message,) = [str(w.message) for w in caught]
    assert ") has no bfloat16 instructions (BF16), so PyTorch" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cli_checks.check_precision(cli.trainer, WITH_AMX)  # the instructions are there
        cli_checks.check_precision(cli.trainer, "")  # not Linux: nothing known, nothing said


def test_float32_says_nothing_whatever_the_cpu(tmp_path: Path) -> None:
    cli = main(["--config", str(_config(tmp_path)), "--trainer.precision=32-true"], run=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cli_checks.check_precision(cli.trainer, AVX2_ONLY)


def test_a_fit_in_bfloat16_warns_before_its_first_step_on_such_a_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command line runs the check before the run (and trains as asked: a warning, not a refusal)."""
    read = cli_checks.native_bf16
    monkeypatch.setattr(cli_checks, "native_bf16", lambda cpuinfo=None: read(AVX2_ONLY))
    config = str(_config(tmp_path))
    with pytest.warns(UserWarning, match=r"^--trainer\.precision bf16-mixed: this CPU \(.*\) has no bfloat16"):
        assert entry(["fit", "--config", config, "--trainer.precision=bf16-mixed", "--trainer.max_steps=2"]) == 0
    assert (tmp_path / "logs" / "version_0" / "checkpoints" / "last.ckpt").is_file()
