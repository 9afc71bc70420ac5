"""The harnesses' own machinery: a broken part fails naming the property, the checks run by name, the parameters
leave out what does not apply, the stand-ins of ``pytest.raises`` and ``pytest.approx`` agree with pytest's, and a
user's test file checks a target with one line, pytest not imported by the package."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from scipy import stats

from lightning_episodes.algorithms import ProtoNet
from lightning_episodes.testing import (
    ALGORITHM_CHECKS,
    DATASET_CHECKS,
    TARGET_CHECKS,
    AlgorithmSpec,
    DatasetSpec,
    Fabricated,
    TargetSpec,
    check_target,
    contract_params,
)
from lightning_episodes.testing._checks import assert_approx, raises
from lightning_episodes.weighting import Target

ROOT = Path(__file__).resolve().parents[2]


class _Linear(Target):
    """``z + c``: the triangular law on ``[-c, c]``."""

    def density(self, z: torch.Tensor, support_sigmas: float, progress: float | None) -> torch.Tensor:
        return z + support_sigmas


def _triangular(z: object, c: float, _: float | None) -> object:
    return stats.triang(1.0, loc=-c, scale=2 * c).pdf(z)


def _uniform(z: object, c: float, _: float | None) -> object:
    return stats.uniform(-c, 2 * c).pdf(z)


def _no_files(root: Path) -> Fabricated:
    return Fabricated({})


def test_a_part_that_keeps_the_contract_passes_every_check() -> None:
    check_target(TargetSpec(_Linear(), pdf=_triangular))


def test_a_broken_part_fails_naming_itself_and_the_property() -> None:
    with pytest.raises(AssertionError, match=r"^_Linear breaks the contract's 'density_is_the_reference':\n"):
        check_target(TargetSpec(_Linear(), pdf=_uniform))
    with pytest.raises(AssertionError, match=r"^linear breaks the contract's 'declarations': \(needs_progress"):
        check_target(TargetSpec(_Linear(), pdf=_triangular, needs_progress=True, name="linear"))


def test_only_the_named_checks_run_and_an_unknown_name_is_an_error() -> None:
    check_target(
        TargetSpec(_Linear(), pdf=_uniform), checks=["declarations", "density_is_asked_inside_the_support_in_float64"]
    )
    with pytest.raises(ValueError, match=r"checks: unknown \['density'\]; available: declarations, "):
        check_target(TargetSpec(_Linear(), pdf=_triangular), checks=["density"])


def test_an_error_other_than_an_assertion_is_raised_as_it_is_with_a_note() -> None:
    class Failing(Target):
        def density(self, z: torch.Tensor, support_sigmas: float, progress: float | None) -> torch.Tensor:
            raise RuntimeError("no density today")

    with pytest.raises(RuntimeError, match="no density today") as error:
        check_target(TargetSpec(Failing(), pdf=_uniform))
    assert error.value.__notes__ == ["(raised while checking 'declarations' of Failing)"]


def test_the_parameters_are_one_per_part_and_property_that_applies() -> None:
    targets = [TargetSpec("uniform", pdf=_uniform), TargetSpec(_Linear(), pdf=_triangular)]
    params = contract_params(targets, TARGET_CHECKS)
    assert [p.id for p in params] == [f"{spec}-{name}" for spec in targets for name in TARGET_CHECKS]
    assert [p.values for p in params[:2]] == [(targets[0], "declarations"), (targets[0], "density_is_the_reference")]
    # a loader with a one-class split has no scarce 2-way training, nor colours where it renders characters
    loader = DatasetSpec("glyphs-100", _no_files, (5, 1, 1), solid_colours=False)
    left = {p.values[1] for p in contract_params([loader], DATASET_CHECKS)}
    assert set(DATASET_CHECKS) - left == {
        "scarce_training_keeps_two_images_per_class",
        "images_show_their_class_colour",
    }
    # an algorithm without bad arguments of its own checks only the base's
    left = {p.values[1] for p in contract_params([AlgorithmSpec(ProtoNet)], ALGORITHM_CHECKS)}
    assert set(ALGORITHM_CHECKS) - left == {"rejects_bad_configs"}


def test_raises_is_pytest_raises() -> None:
    with raises(ValueError, match=r"model\.ways") as caught:
        raise ValueError("model.ways must be >= 2")
    assert isinstance(caught[0], ValueError)
    with raises((FileNotFoundError, ValueError), match="root"):
        raise FileNotFoundError("data.root")
    with pytest.raises(AssertionError, match=r"does not match 'shots'"), raises(ValueError, match="shots"):
        raise ValueError("model.ways must be >= 2")
    with pytest.raises(AssertionError, match="nothing was raised"), raises(ValueError, match=""):
        pass
    with pytest.raises(KeyError), raises(ValueError, match=""):  # another exception passes through
        raise KeyError("ways")


@pytest.mark.parametrize(
    ("actual", "expected", "rel", "abs_tol"),
    [
        (1.0 + 1e-7, 1.0, 1e-6, 1e-12),
        (1.0 + 2e-6, 1.0, 1e-6, 1e-12),
        (5e-13, 0.0, 1e-6, 1e-12),
        (2e-12, 0.0, 1e-6, 1e-12),
        (1.0 + 5e-7, 1.0, 0.0, 1e-6),
        (1.0 + 2e-6, 1.0, 0.0, 1e-6),
        (-3.0, -3.0 - 3e-10, 1e-10, 1e-12),
        (-3.0, -3.0 - 3e-9, 1e-10, 1e-12),
    ],
)
def test_assert_approx_is_pytest_approx(actual: float, expected: float, rel: float, abs_tol: float) -> None:
    if actual == pytest.approx(expected, rel=rel, abs=abs_tol):
        assert_approx(actual, expected, rel, abs_tol)
    else:
        with pytest.raises(AssertionError, match=r"value: .* != .* ± "):
            assert_approx(actual, expected, rel, abs_tol)
    assert_approx({"a": actual}, {"a": actual})
    with pytest.raises(AssertionError, match=r"keys \['a'\] != \['b'\]"):
        assert_approx({"a": actual}, {"b": actual})


def test_a_users_test_file_checks_a_target_with_one_line_without_pytest_in_the_package(tmp_path: Path) -> None:
    """The guide's first example, as a test file of a project of its own, under pytest (the docs test runs it with
    ``python``); importing every harness imports neither pytest nor the command line."""
    guide = (ROOT / "docs/guides/testing.md").read_text()
    example = re.findall(r"```python\n(.*?)```", guide, flags=re.DOTALL)[0]
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_linear_hard.py").write_text(example)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout
    imports = (
        "import sys\n"
        "from lightning_episodes.testing import check_algorithm, check_dataset, check_normalizer, check_proposal\n"
        "from lightning_episodes.testing import check_target, tiny_datamodule\n"
        "print(sorted({'pytest', 'hypothesis', 'lightning_episodes.cli'} & set(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", imports], env=env, capture_output=True, text=True, timeout=600)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr[-3000:]
