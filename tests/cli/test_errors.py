"""Mistakes on the command line are one line naming the parameter, with exit status 2 and no traceback
(through the real console script, as a user runs it); LIGHTNING_EPISODES_DEBUG=1 brings the traceback back."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from lightning_episodes.console import DEBUG_ENV, suggest_options, user_error

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent / "lightning-episodes"
QUICKSTART = str(ROOT / "configs/quickstart.yaml")
UNIFORM = str(ROOT / "configs/sampling/uniform_online.yaml")


def _run(tmp_path: Path, *args: str, debug: bool = False) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != DEBUG_ENV}
    if debug:
        env[DEBUG_ENV] = "1"
    return subprocess.run([str(BIN), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def _error_line(stderr: str, command: str = "fit") -> str:
    lines = [line for line in stderr.splitlines() if line.startswith(f"lightning-episodes {command}: error: ")]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # a value our classes refuse when the config is instantiated
        (["--data.ways", "1"], "data.ways must be >= 2, got 1"),
        pytest.param(
            ["--data.train_images_per_class", "19"],
            "data.train_images_per_class=19 must be >= data.shots + data.queries = 5 + 15 = 20",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ["--data.train_classes", "3"],
            "data.train_classes=3 must be a fraction of the training classes in (0, 1] or a whole number of them "
            ">= data.ways = 5",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ["--config", UNIFORM, "--trainer.callbacks.decay", "1.5"],
            ("decay must be", "[0, 1)", "got 1.5"),
            marks=pytest.mark.slow,
        ),
        # values the parser refuses: a wrong type, a choice outside a Literal, an unknown option
        pytest.param(["--data.ways", "abc"], "--data.ways: expected int, got abc", marks=pytest.mark.slow),
        pytest.param(
            ["--model.distance", "manhattan"],
            "--model.distance: expected one of 'euclidean', 'cosine', got manhattan",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ["--data.nope", "1"],
            "--data: Option 'nope' is not accepted by lightning_episodes.data.EpisodicDataModule",
            marks=pytest.mark.slow,
        ),
        pytest.param(["--nope", "1"], "unknown option --nope", marks=pytest.mark.slow),
    ],
)
def test_a_bad_value_is_one_line_with_status_2(tmp_path: Path, args: list[str], message: str | tuple[str]) -> None:
    done = _run(tmp_path, "fit", "--config", QUICKSTART, *args)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "Given value" not in done.stderr  # jsonargparse's dump of the whole namespace
    line = _error_line(done.stderr)
    assert all(part in line for part in ((message,) if isinstance(message, str) else message)), line
    assert "usage: lightning-episodes fit" in done.stderr
    assert DEBUG_ENV in done.stderr  # says how to see the traceback


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model.optimizer.init_args.lr", "-1"], "model.optimizer (Adam): Invalid learning rate: -1.0"),
        (
            ["--model.optimizer", "torch.optim.SGD", "--model.optimizer.init_args.momentum", "-0.5"],
            "model.optimizer (SGD): Invalid momentum value: -0.5",
        ),
    ],
)
def test_a_bad_optimiser_argument_is_one_line_before_anything_is_written(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """The optimiser is built in configure_optimizers, inside Trainer.fit, after the run's config.yaml is written:
    a bad argument was a 63-line traceback from its constructor. It is checked before any folder is written."""
    done = _run(tmp_path, "fit", "--config", QUICKSTART, *args)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert _error_line(done.stderr) == f"lightning-episodes fit: error: {message}"
    assert not (tmp_path / "runs").exists()  # no log folder, no config.yaml, no checkpoint folder


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trainer.max_step", "10"], "unknown option --trainer.max_step; did you mean --trainer.max_steps?"),
        (
            ["--data.shot", "3"],
            "--data: Option 'shot' is not accepted by lightning_episodes.data.EpisodicDataModule; did you mean "
            "--data.shots?",
        ),
        (
            ["--config", "typo.yaml"],
            "Subcommand 'fit' does not accept option 'trainer.max_step'; did you mean trainer.max_steps?",
        ),
    ],
)
def test_an_abbreviated_or_unknown_option_names_the_nearest_and_runs_nothing(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """argparse took `--trainer.max_step 10` for `--trainer.max_steps`: the quickstart ran (exit 0), overwriting its
    run. Every option is named in full, on the command line or in a config file."""
    (tmp_path / "typo.yaml").write_text("trainer:\n  max_step: 10\n")
    done = _run(tmp_path, "fit", "--config", "quickstart", *args)
    assert done.returncode == 2, done.stderr[-2000:]
    assert _error_line(done.stderr) == f"lightning-episodes fit: error: {message}"
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["typo.yaml"]  # no runs/: nothing trained, no checkpoint


@pytest.mark.parametrize("command", ["fit", "validate", "test"])
def test_every_subcommand_refuses_an_abbreviated_option(command: str) -> None:
    from lightning_episodes.cli import main

    with pytest.raises(argparse.ArgumentError, match=r"^unknown option --trainer.max_step; did you mean --trainer"):
        main([command, "--model", "ProtoNet", "--trainer.max_step", "10"], exit_on_error=False)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "unrecognized arguments: --trainer.max_step 10",
            "unknown option --trainer.max_step; did you mean --trainer.max_steps?",
        ),
        (
            "unrecognized arguments: --trainer.max_step=10",
            "unknown option --trainer.max_step; did you mean --trainer.max_steps?",
        ),
        ("unrecognized arguments: --nope 1", "unknown option --nope"),
        (
            "unrecognized arguments: --trainer.max_epoch 3 --nope",
            "unknown options --trainer.max_epoch (did you mean --trainer.max_epochs?), --nope",
        ),
        ("unrecognized arguments: extra", "unrecognized arguments: extra"),  # no option: argparse's words
        ("Option 'shot' is not accepted", "Option 'shot' is not accepted; did you mean --shots?"),
        ("expected int, got x", "expected int, got x"),
    ],
)
def test_suggest_options_names_the_nearest_options(message: str, expected: str) -> None:
    options = ["--trainer.max_steps", "--trainer.min_steps", "--trainer.max_epochs", "--trainer.min_epochs", "--shots"]
    assert suggest_options(message, options) == expected


@pytest.mark.slow
def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("trainer:\n  max_steps: 3\n  callbacks: [1, 2\n")
    done = _run(tmp_path, "fit", "--config", QUICKSTART, "--config", str(broken))
    assert done.returncode == 2, done.stderr[-2000:]
    line = _error_line(done.stderr)
    assert f'in "{broken}", line 3, column 14' in line
    assert "<unicode string>" not in line


@pytest.mark.slow
def test_a_setup_error_names_the_parameter_and_the_split(tmp_path: Path) -> None:
    """Raised when the data module checks the request against the dataset, inside Trainer.fit."""
    done = _run(tmp_path, "fit", "--config", QUICKSTART, "--data.shots", "500")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    line = _error_line(done.stderr)
    assert "data.shots + queries = 515 exceeds the smallest class" in line
    assert "split 'train'" in line


@pytest.mark.slow
def test_a_download_without_learn2learn_is_one_line_naming_the_option(tmp_path: Path) -> None:
    """The real console script in an environment without learn2learn: the download stops at set-up, in one line that
    names the option and says how to install learn2learn (not a ModuleNotFoundError traceback)."""
    code = "import sys; sys.modules['learn2learn'] = None; import lightning_episodes.console as c; sys.exit(c.entry())"
    data = ["--data.dataset", "mini-imagenet", "--data.root", str(tmp_path / "data"), "--data.download", "true"]
    trainer = ["--trainer.max_steps", "1", "--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path)]
    command = [sys.executable, "-c", code, "fit", "--model", "ProtoNet", *data, *trainer]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    line = _error_line(done.stderr)
    assert "data.download=true: downloading mini-imagenet needs learn2learn, which is not installed" in line
    assert "install it with `make learn2learn`" in line
    assert not (tmp_path / "data").exists()


@pytest.mark.slow
def test_the_debug_variable_shows_the_traceback(tmp_path: Path) -> None:
    done = _run(tmp_path, "fit", "--config", QUICKSTART, "--data.ways", "0", debug=True)
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert "data.ways must be >= 2, got 0" in done.stderr


@pytest.mark.slow
def test_a_tool_error_is_one_line_too(tmp_path: Path) -> None:
    done = _run(tmp_path, "difficulty", "--ckpt_path", str(tmp_path / "none.ckpt"), "--output", "x.csv")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "none.ckpt does not exist" in done.stderr


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[1000,0]", "--validation_at: expected a value > 0, got 0"),
        ("1000", "--validation_at: expected list, got 1000"),
    ],
)
def test_a_tools_restricted_number_is_refused_in_one_line_naming_the_option(
    tmp_path: Path, value: str, message: str
) -> None:
    done = _run(tmp_path, "report", str(tmp_path), "--validation-at", value)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert _error_line(done.stderr, "report") == f"lightning-episodes report: error: {message}"


def _raised(action: Callable[[], object]) -> BaseException:
    with pytest.raises(Exception) as caught:  # noqa: PT011  (any exception: its traceback is what matters)
        action()
    return caught.value


def _raise(error: BaseException) -> Callable[[], object]:
    def action() -> object:
        raise error

    return action


def test_only_user_errors_lose_their_traceback() -> None:
    """A bug (an exception the user cannot fix by changing arguments) keeps its traceback."""
    assert user_error(_raised(_raise(RuntimeError("an internal bug")))) is None
    assert user_error(_raised(lambda: {}["key"])) is None
    assert user_error(_raised(lambda: int("x"))) is None  # a ValueError from outside this package
    missing = _raised(_raise(FileNotFoundError("checkpoint x.ckpt does not exist")))
    assert user_error(missing) == "checkpoint x.ckpt does not exist"
    parser = argparse.ArgumentError(None, "Parser key \"data.ways\":\n  Expected a <class 'int'>. Got value: x")
    assert user_error(_raised(_raise(parser))) == "--data.ways: expected int, got x"
