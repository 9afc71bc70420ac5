"""Contract harnesses for your own algorithm, dataset loader, target, proposal, normaliser or task sampler: one line
in a test file of your project checks that it keeps the contract that every built-in one keeps (the library's own
tests use the same harnesses).

Fill a spec (:class:`TargetSpec`, :class:`ProposalSpec`, :class:`NormalizerSpec`, :class:`AlgorithmSpec`,
:class:`DatasetSpec`, :class:`TaskSamplerSpec`) and call its ``check_*`` function: it runs every check of the
contract and raises an :class:`AssertionError` naming the first property that fails. pytest is not needed (the checks
are plain ``assert``s); :func:`contract_params` makes one pytest test per property. The algorithm harness trains on a
tiny in-memory dataset (:func:`tiny_datamodule`, :func:`tiny_trainer`), yours to use in your own tests too.

The names below are imported when first used, so that checking a target does not import the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_episodes._lazy import lazy_exports

if TYPE_CHECKING:
    from lightning_episodes.testing._checks import Check, contract_params, roundtrip, same_state
    from lightning_episodes.testing.algorithms import ALGORITHM_CHECKS, AlgorithmSpec, check_algorithm
    from lightning_episodes.testing.datasets import DATASET_CHECKS, DatasetSpec, Fabricated, check_dataset
    from lightning_episodes.testing.normalizers import NORMALIZER_CHECKS, NormalizerSpec, check_normalizer
    from lightning_episodes.testing.proposals import (
        PROPOSAL_CHECKS,
        ProposalReference,
        ProposalSpec,
        check_proposal,
    )
    from lightning_episodes.testing.targets import TARGET_CHECKS, TargetSpec, check_target
    from lightning_episodes.testing.task_samplers import TASK_SAMPLER_CHECKS, TaskSamplerSpec, check_task_sampler
    from lightning_episodes.testing.tiny import (
        decode_rows,
        register_tiny_dataset,
        tiny_datamodule,
        tiny_dataset,
        tiny_trainer,
    )

#: public name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys(("Check", "contract_params", "roundtrip", "same_state"), "lightning_episodes.testing._checks"),
    **dict.fromkeys(("ALGORITHM_CHECKS", "AlgorithmSpec", "check_algorithm"), "lightning_episodes.testing.algorithms"),
    **dict.fromkeys(
        ("DATASET_CHECKS", "DatasetSpec", "Fabricated", "check_dataset"), "lightning_episodes.testing.datasets"
    ),
    **dict.fromkeys(
        ("NORMALIZER_CHECKS", "NormalizerSpec", "check_normalizer"), "lightning_episodes.testing.normalizers"
    ),
    **dict.fromkeys(
        ("PROPOSAL_CHECKS", "ProposalReference", "ProposalSpec", "check_proposal"),
        "lightning_episodes.testing.proposals",
    ),
    **dict.fromkeys(("TARGET_CHECKS", "TargetSpec", "check_target"), "lightning_episodes.testing.targets"),
    **dict.fromkeys(
        ("TASK_SAMPLER_CHECKS", "TaskSamplerSpec", "check_task_sampler"), "lightning_episodes.testing.task_samplers"
    ),
    **dict.fromkeys(
        ("decode_rows", "register_tiny_dataset", "tiny_datamodule", "tiny_dataset", "tiny_trainer"),
        "lightning_episodes.testing.tiny",
    ),
}

__all__ = [
    "ALGORITHM_CHECKS",
    "AlgorithmSpec",
    "Check",
    "DATASET_CHECKS",
    "DatasetSpec",
    "Fabricated",
    "NORMALIZER_CHECKS",
    "NormalizerSpec",
    "PROPOSAL_CHECKS",
    "ProposalReference",
    "ProposalSpec",
    "TARGET_CHECKS",
    "TASK_SAMPLER_CHECKS",
    "TargetSpec",
    "TaskSamplerSpec",
    "check_algorithm",
    "check_dataset",
    "check_normalizer",
    "check_proposal",
    "check_target",
    "check_task_sampler",
    "contract_params",
    "decode_rows",
    "register_tiny_dataset",
    "roundtrip",
    "same_state",
    "tiny_datamodule",
    "tiny_dataset",
    "tiny_trainer",
]


__getattr__, __dir__ = lazy_exports("lightning_episodes.testing", globals(), _EXPORTS)
