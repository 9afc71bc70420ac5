"""The run record's helpers: the scenario a record belongs to, and the defaults that older records were written with."""

from __future__ import annotations

import inspect

from lightning_episodes.callbacks import DifficultyWeightingCallback


def test_the_legacy_defaults_are_this_versions_callback_defaults() -> None:
    """The defaults that older records were written with. When a default of the callback changes, this table keeps
    the old value (older records were written with it) and this test lists the difference."""
    from lightning_episodes.evaluation.record import LEGACY_SAMPLING_DEFAULTS

    assert dict(LEGACY_SAMPLING_DEFAULTS) == {
        name: parameter.default
        for name, parameter in inspect.signature(DifficultyWeightingCallback.__init__).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }


def test_the_scenario_hash_ignores_the_training_seed_only() -> None:
    from lightning_episodes.evaluation.record import scenario_hash as _scenario_hash

    hparams = {"backbone": "conv4", "distance": "euclidean"}
    data = {"dataset": "glyphs", "ways": 5, "shots": 1, "seed": 0, "train_seed": 0}
    same = _scenario_hash(hparams, data)
    assert _scenario_hash(hparams, {**data, "train_seed": 2}) == same
    assert _scenario_hash(hparams, {k: v for k, v in data.items() if k != "train_seed"}) == same
    assert _scenario_hash(hparams, {**data, "seed": 1}) != same  # other test episodes: another scenario
    assert _scenario_hash(hparams, {**data, "shots": 5}) != same
    assert _scenario_hash({**hparams, "distance": "cosine"}, data) != same
