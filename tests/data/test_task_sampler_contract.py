"""Every built-in task sampler keeps the task-sampler contract (:func:`~lightning_episodes.testing.check_task_sampler`),
one test per sampler and property. The samplers come from the configs of ``configs/task_sampling/``: a new config
is checked without a line here, and a sampler the package exports without a config fails the coverage test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import lightning_episodes.data
from lightning_episodes.data import TaskSampler
from lightning_episodes.testing import TASK_SAMPLER_CHECKS, TaskSamplerSpec, check_task_sampler, contract_params
from lightning_episodes.weighting.registry import import_object

CONFIGS = sorted((Path(lightning_episodes.data.__file__).parents[1] / "configs" / "task_sampling").glob("*.yaml"))
#: arguments that bring a sampler's adaptive part within the checks' 8 steps, or that its config leaves to the
#: command line (a reference checkpoint: the checks give the class features by hand)
SHORTER: dict[str, dict[str, Any]] = {
    "HardTaskMining": {"warmup_steps": 1},
    "DynamicDPP": {"warmup_steps": 2, "refresh_every": 3},
    "StaticDPP": {"reference_checkpoint": "reference.ckpt"},
}


def _sampler_config(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())["data"]["init_args"]["task_sampler"]


def _spec(path: Path) -> TaskSamplerSpec:
    config = _sampler_config(path)
    cls = import_object(config["class_path"])
    options = {**(config.get("init_args") or {}), **SHORTER.get(cls.__name__, {})}
    return TaskSamplerSpec(cls, options, name=path.stem)


SPECS = [_spec(path) for path in CONFIGS]


@pytest.mark.parametrize(("spec", "check"), contract_params(SPECS, TASK_SAMPLER_CHECKS))
def test_task_sampler_contract(spec: TaskSamplerSpec, check: str) -> None:
    check_task_sampler(spec, checks=[check])


def test_every_exported_task_sampler_has_a_config_and_so_a_contract_test() -> None:
    exported = {
        name
        for name in lightning_episodes.data.__all__
        if isinstance(value := getattr(lightning_episodes.data, name), type)
        and issubclass(value, TaskSampler)
        and value is not TaskSampler
    }
    covered = {spec.cls.__name__ for spec in SPECS}
    assert exported == covered, f"task samplers without a config in configs/task_sampling/: {exported - covered}"
    assert len(SPECS) == len(covered), "two configs of one sampler"  # one config a sampler: its name is the test id


def test_a_sampler_that_breaks_the_contract_is_named_with_the_property() -> None:
    class Forgetful(lightning_episodes.data.HardTaskMining):
        """Checkpoints nothing: a resumed run forgets the hard class sets."""

        def state_dict(self) -> dict[str, Any]:
            return {}

    with pytest.raises(AssertionError, match="Forgetful breaks the contract's 'a_resumed_run_continues_exactly'"):
        check_task_sampler(TaskSamplerSpec(Forgetful, {"warmup_steps": 1}), ["a_resumed_run_continues_exactly"])
