"""A user's own target, proposal, normaliser, task sampler and algorithm, in a module outside the package, trained
from YAML by class path and by registered name (``--import``, an entry point), and the Student-t's maths."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml
from scipy import stats

from lightning_episodes.callbacks import DifficultyWeightingCallback
from lightning_episodes.cli import main
from lightning_episodes.cli_imports import modules_to_import
from lightning_episodes.weighting import registry
from lightning_episodes.weighting.normalizers import NORMALIZER_REGISTRY
from lightning_episodes.weighting.proposals import PROPOSAL_REGISTRY
from lightning_episodes.weighting.targets import _REGISTRY as TARGET_REGISTRY
from tests.cli.test_cli import TINY_DATA

ROOT = Path(__file__).resolve().parents[2]

#: the user's module, as a researcher writes it following docs/guides/own-target.md (``{name}``: the module's name,
#: also in the class names that the tests give without their module: a short name must be one class in the process)
USER_MODULE = '''
"""My lab's weighting parts."""

import math

import torch

from lightning_episodes import ProtoNet
from lightning_episodes.data.task_samplers import TaskSampler
from lightning_episodes.weighting import (
    EpisodeWeights, MomentProposal, Normalizer, Target, register_normalizer, register_proposal, register_target,
)


@register_proposal("{name}.student_t")
class StudentT(MomentProposal):
    """Student-t with ``df`` degrees of freedom, located at the moving mean, scaled by the moving std.

    Args:
        df: degrees of freedom, > 0.
        support_sigmas: c.
        decay: the moving average's weight of the old value.
        warmup_steps: steps of plain sampling.
        update: "episode" or "batch".
    """

    def __init__(self, df: float = 5.0, support_sigmas: float = 2.58, decay: float = 0.9, warmup_steps: int = 100,
                 update: str = "episode") -> None:
        if not df > 0:
            raise ValueError(f"StudentT: df must be > 0, got {{df!r}}")
        super().__init__(support_sigmas, decay, warmup_steps, update)
        self.df = float(df)

    def log_density(self, x: torch.Tensor) -> torch.Tensor:
        nu, s = self.df, self.scale
        z = (x - self.location) / s
        const = math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * math.log(nu * math.pi) - math.log(s)
        return const - (nu + 1) / 2 * torch.log1p(z * z / nu)

    def support(self) -> tuple[float, float]:
        return self.location - self.support_sigmas * self.scale, self.location + self.support_sigmas * self.scale


@register_target("{name}.peaked")
class Peaked(Target):
    """Triangular density on [-c, c] with its mode at ``peak * c``.

    Args:
        peak: where the mode lies, from -1 (the easiest end) to 1 (the hardest).
    """

    def __init__(self, peak: float = 0.0) -> None:
        if not -1.0 <= peak <= 1.0:
            raise ValueError(f"Peaked: peak must be in [-1, 1], got {{peak!r}}")
        self.peak = float(peak)

    def density(self, z: torch.Tensor, support_sigmas: float, progress: float | None) -> torch.Tensor:
        c, m = support_sigmas, self.peak * support_sigmas
        rising = (z + c) / max(m + c, 1e-12)
        falling = (c - z) / max(c - m, 1e-12)
        return torch.where(z <= m, rising, falling).clamp(min=0.0)


@register_normalizer("{name}.batch_mean")
class BatchMean(Normalizer):
    """sum w L / |B|."""

    def normalize(self, weights: torch.Tensor) -> EpisodeWeights:
        return EpisodeWeights(weights, "denominator", weights.new_tensor(float(weights.numel())))


class RoundRobin_{name}(TaskSampler):
    """Episode j of step s holds classes (s B + j) ways ... + ways - 1, modulo the split's size."""

    def classes(self, seed: int, step: int, episodes) -> torch.Tensor:
        start = [(step * self.episodes_per_batch + j) * self.ways for j in episodes]
        return torch.tensor([[(s + k) % self.num_classes for k in range(self.ways)] for s in start])


class LabProtoNet_{name}(ProtoNet):
    """ProtoNet under my lab's name."""
'''


@pytest.fixture
def user_module(tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module of the user's in ``tmp_path`` (on ``sys.path``), under a name of its own; the registries are
    restored afterwards."""
    name = f"mylab_{request.node.name.split('[')[0][-24:]}"
    (tmp_path / f"{name}.py").write_text(USER_MODULE.format(name=name))
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = [dict(r._entries) for r in (TARGET_REGISTRY, PROPOSAL_REGISTRY, NORMALIZER_REGISTRY)]
    yield name
    for r, entries in zip((TARGET_REGISTRY, PROPOSAL_REGISTRY, NORMALIZER_REGISTRY), saved, strict=True):
        r._entries = entries
    sys.modules.pop(name, None)


def _config(tmp_path: Path, name: str, weighting: dict, sampler: object, model: object, **top: object) -> Path:
    config = {
        **top,
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu", "devices": 1, "max_steps": 3, "val_check_interval": 3,
            "check_val_every_n_epoch": None, "logger": False, "enable_checkpointing": False,
            "enable_progress_bar": False, "enable_model_summary": False, "default_root_dir": str(tmp_path),
            "callbacks": [{"class_path": "lightning_episodes.callbacks.DifficultyWeightingCallback",
                           "init_args": {"warmup_steps": 2, **weighting}}],
        },
        "model": model,
        "data": {"init_args": {"task_sampler": sampler}},
    }  # fmt: skip
    path = tmp_path / "user.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _weighting(cli: object) -> DifficultyWeightingCallback:
    return next(c for c in cli.trainer.callbacks if isinstance(c, DifficultyWeightingCallback))  # type: ignore[attr-defined]


def _fit(config: Path, *extra: str) -> object:
    return main(["fit", "--config", str(config), *TINY_DATA, "--data.val_episodes=4", *extra])


@pytest.mark.slow
def test_a_users_components_train_from_yaml_by_class_path(tmp_path: Path, user_module: str) -> None:
    """Class paths with init_args (df, peak) import the module by themselves: no --import, no registration needed."""
    weighting = {
        "target": {"class_path": f"{user_module}.Peaked", "init_args": {"peak": 0.5}},
        "proposal": {"class_path": f"{user_module}.StudentT", "init_args": {"df": 3, "warmup_steps": 2}},
        "normalization": {"class_path": f"{user_module}.BatchMean"},
    }
    sampler = {"class_path": f"{user_module}.RoundRobin_{user_module}"}
    model = {"class_path": f"{user_module}.LabProtoNet_{user_module}"}
    cli = _fit(_config(tmp_path, user_module, weighting, sampler, model))
    callback = _weighting(cli)
    proposal = callback.state.proposal
    assert (type(proposal).__name__, proposal.df, proposal.steps, proposal.ready) == ("StudentT", 3.0, 3, True)
    assert (type(callback.target).__name__, callback.target.peak) == ("Peaked", 0.5)
    assert type(callback.state.normalizer).__name__ == "BatchMean"
    assert type(cli.model).__name__ == f"LabProtoNet_{user_module}"  # type: ignore[attr-defined]
    assert type(cli.datamodule.task_sampler).__name__ == f"RoundRobin_{user_module}"  # type: ignore[attr-defined]
    assert callback.last_step is not None
    assert not callback.last_step.warmup
    # the record names each object by class path and init_args
    assert callback.options["proposal"] == {
        "class_path": f"{user_module}.StudentT",
        "init_args": {"df": 3, "support_sigmas": 2.58, "decay": 0.9, "warmup_steps": 2, "update": "episode"},
    }
    assert callback.options["target"] == {"class_path": f"{user_module}.Peaked", "init_args": {"peak": 0.5}}


@pytest.mark.slow
@pytest.mark.parametrize("route", ["--import", "config", "env"])
def test_a_users_components_train_from_yaml_by_name(
    tmp_path: Path, user_module: str, route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registered names and short class names, once the module is imported by --import, a config's import list or
    the environment variable; the name form builds the proposal with the callback's options."""
    weighting = {"target": f"{user_module}.peaked", "proposal": f"{user_module}.student_t",
                 "normalization": f"{user_module}.batch_mean", "decay": 0.8}  # fmt: skip
    top = {"import": [user_module]} if route == "config" else {}
    sampler, model = f"RoundRobin_{user_module}", f"LabProtoNet_{user_module}"  # short names: the classes'
    config = _config(tmp_path, user_module, weighting, sampler, model, **top)
    extra = ["--import", user_module] if route == "--import" else []
    if route == "env":
        monkeypatch.setenv("LIGHTNING_EPISODES_IMPORT", f"json,{user_module}")
    callback = _weighting(cli := _fit(config, *extra))
    proposal = callback.state.proposal
    assert (type(proposal).__name__, proposal.df, proposal.estimator.decay, proposal.ready) == (
        "StudentT",
        5.0,
        0.8,
        True,
    )
    assert type(cli.datamodule.task_sampler).__name__ == sampler  # type: ignore[attr-defined]
    assert type(cli.model).__name__ == model  # type: ignore[attr-defined]
    assert callback.options["proposal"] == f"{user_module}.student_t"
    if route != "env":
        assert cli.config["fit"]["import"] == [user_module]  # type: ignore[attr-defined]  # the saved config keeps it


def test_modules_to_import_reads_the_option_the_configs_and_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("import: [b, a]\n")
    args = ["fit", "--config", str(config), "--import", "c", "--import=a", "--config=missing.yaml"]
    assert modules_to_import(args, {"LIGHTNING_EPISODES_IMPORT": "d, b"}) == ["d", "b", "a", "c"]


def test_an_unknown_name_says_how_to_make_a_component_found() -> None:
    with pytest.raises(ValueError, match=r"proposal must be one of \['normal', 'lognormal', 'empirical'\].*") as error:
        DifficultyWeightingCallback(proposal="nolab.student_t")
    message = str(error.value)
    assert "--import" in message
    assert "lightning_episodes.components" in message
    assert "class_path" in message
    assert "\n" not in message


def test_an_entry_point_makes_a_registered_name_known(
    tmp_path: Path, user_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package that lists its module in the group lightning_episodes.components: its names are found without an
    import (they are dotted after ``eplab``, which is no module: only the entry point can find them)."""
    (tmp_path / f"{user_module}_ep.py").write_text(USER_MODULE.format(name="eplab"))
    info = tmp_path / "mylab_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mylab-pkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[lightning_episodes.components]\nmylab = {user_module}_ep\n")
    monkeypatch.setattr(registry, "_loaded_entry_points", False)
    monkeypatch.delitem(sys.modules, f"{user_module}_ep", raising=False)
    assert "eplab.student_t" not in PROPOSAL_REGISTRY
    callback = DifficultyWeightingCallback(proposal="eplab.student_t", target="eplab.peaked", warmup_steps=5)
    assert type(callback.state.proposal).__name__ == "StudentT"
    assert callback.state.proposal.init_args["warmup_steps"] == 5  # a name takes the callback's options
    assert type(callback.target).__name__ == "Peaked"
    sys.modules.pop(f"{user_module}_ep", None)


def test_the_student_t_density_is_scipys(tmp_path: Path, user_module: str) -> None:
    """Hand-written log-density of the user's Student-t against scipy.stats.t at the fitted location and scale."""
    module = __import__(user_module)
    q = module.StudentT(df=3)
    data = torch.tensor([0.5, 1.0, 1.5, 2.5], dtype=torch.float64)
    q.fit(data)
    mu, sigma = float(data.mean()), float(data.std(correction=0))
    assert (q.location, q.scale) == pytest.approx((mu, sigma))
    x = torch.tensor([0.2, 1.375, 3.0], dtype=torch.float64)
    expected = stats.t(df=3, loc=mu, scale=sigma).logpdf(x.numpy())
    assert q.log_density(x).numpy() == pytest.approx(expected, rel=1e-12)
    # at the centre: log Gamma(2) - log Gamma(1.5) - log(sqrt(3 pi) sigma) = log(2 / (pi sqrt 3 sigma))
    assert float(q.log_density(torch.tensor([mu], dtype=torch.float64))) == pytest.approx(
        math.log(2.0 / (math.pi * math.sqrt(3.0) * sigma)), rel=1e-12
    )
    with pytest.raises(ValueError, match=r"df must be > 0, got 0"):
        module.StudentT(df=0)


@pytest.mark.slow
def test_the_real_command_line_trains_a_users_module_on_pythonpath(tmp_path: Path) -> None:
    """``python -m lightning_episodes fit`` in a new process: the module is found on PYTHONPATH by class path, with
    nothing else (the tiny dataset is registered by a second module the run imports with --import)."""
    (tmp_path / "mylab.py").write_text(USER_MODULE.format(name="mylab"))
    (tmp_path / "tinydata.py").write_text(
        "from lightning_episodes.testing import register_tiny_dataset\n\nregister_tiny_dataset()\n"
    )
    weighting = {"target": {"class_path": "mylab.Peaked", "init_args": {"peak": -0.5}},
                 "proposal": {"class_path": "mylab.StudentT", "init_args": {"df": 3, "warmup_steps": 2}}}  # fmt: skip
    config = _config(tmp_path, "mylab", weighting, {"class_path": "mylab.RoundRobin_mylab"}, "LabProtoNet_mylab")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "lightning_episodes", "fit", "--import", "tinydata", "--import", "mylab",
         "--config", str(config), *TINY_DATA, "--data.val_episodes=4", "--trainer.max_steps", "3"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
