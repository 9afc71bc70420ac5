"""The run record's helpers: the scenario a record belongs to, the defaults that older records were written with,
where and how a record was made (processor, accelerator, precision), and a record that cannot be read."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

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


CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 amx_int8 avx512_bf16 avx2 avx512f amx_tile amx_bf16 avx512vl

processor\t: 1
model name\t: Another model
flags\t\t: fpu sse2
"""


def test_the_processor_is_the_first_cpus_name_and_its_flags_in_a_fixed_order() -> None:
    from lightning_episodes.evaluation.record import CPU_FLAGS, processor

    assert processor(CPUINFO) == (
        "Intel(R) Xeon(R) Platinum 8480+",
        "avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8",  # CPU_FLAGS' order, avx512vl not among them
    )
    assert CPU_FLAGS == ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8")
    name, flags = processor("processor\t: 0\nFeatures\t: fp asimd\n")  # an Arm /proc/cpuinfo: no model name
    assert name  # the platform's
    assert flags == ""


def test_bfloat16_instructions_are_avx512_bf16_or_amx_on_x86_and_bf16_on_arm() -> None:
    from lightning_episodes.evaluation.record import bf16_extensions, native_bf16

    assert native_bf16(CPUINFO) is True  # the first processor's flags decide
    assert native_bf16("flags : fpu avx2 avx512f avx512vl\n") is False  # AVX-512 without its BF16 extension
    assert native_bf16("flags : avx2 avx512_bf16\n") is True  # a Xeon without AMX, a Zen 4 EPYC
    assert native_bf16("flags : avx2 amx_tile amx_bf16\n") is True
    assert native_bf16("flags :\n") is False  # the list is there and names neither
    assert native_bf16("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n") is True  # Arm v8.6 and later
    assert native_bf16("processor\t: 0\nFeatures\t: fp asimd\n") is False
    assert native_bf16("") is None  # no /proc/cpuinfo (macOS, Windows): not known
    assert bf16_extensions("flags : fpu avx2\n") == "AVX-512 BF16 or AMX"  # what a warning names, per architecture
    assert bf16_extensions("processor\t: 0\nFeatures\t: fp asimd\n") == "BF16"
    assert bf16_extensions("") is None


def test_the_environment_names_the_processor_accelerator_and_precision() -> None:
    from lightning_episodes.evaluation.record import CPU_FLAGS, DEFAULT_PRECISION, environment

    found = environment()
    assert (found["accelerator"], found["precision"], DEFAULT_PRECISION) == ("cpu", "32-true", "32-true")
    assert "device" not in found  # an accelerator's name, on CUDA alone
    assert environment("cpu", "bf16-mixed")["precision"] == "bf16-mixed"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():  # the reference: this machine's first `flags` and `model name` lines, read here
        lines = cpuinfo.read_text().splitlines()
        present = next(line for line in lines if line.startswith("flags")).split(":", 1)[1].split()
        assert found["cpu_flags"] == " ".join(flag for flag in CPU_FLAGS if flag in present)
        model = next((line for line in lines if line.startswith("model name")), None)
        if model is not None:
            assert found["cpu"] == model.split(":", 1)[1].strip()


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_a_test_records_the_trainers_precision_and_where_it_ran(tmp_path: Path, precision: str) -> None:
    from tests.helpers import fit_and_test_record

    record = fit_and_test_record(tmp_path, [], precision=precision, max_steps=2, limit_val_batches=0)
    made = record["environment"]
    assert (made["precision"], made["accelerator"]) == (precision, "cpu")
    assert {"cpu", "cpu_flags", "torch", "python"} <= set(made)


@pytest.mark.parametrize(
    ("text", "config", "reason"),
    [
        ("", None, "is empty (0 bytes)"),
        ("  \n", None, "is empty (3 bytes)"),
        ('{"accuracy": 0.5, "episodes": [\n', None, "is not valid JSON: Expecting value: line 2 column 1 (char 32)"),
        ("[0.5, 0.1]", None, "is not a test record: it needs the numbers 'accuracy' and 'ci95'"),
        ('{"accuracy": 0.5}', None, "is not a test record: it needs the numbers 'accuracy' and 'ci95'"),
        ('{"accuracy": "0.5", "ci95": 0.1}', None, "is not a test record: it needs the numbers 'accuracy' and 'ci95'"),
        ('{"accuracy": 0.5, "ci95": 0.1}', "trainer: [1, 2\n", "has a config.yaml beside it that cannot be read: "),
    ],
)
def test_an_unreadable_record_is_one_message_naming_it(
    tmp_path: Path, text: str, config: str | None, reason: str
) -> None:
    from lightning_episodes.evaluation.record import UnreadableRecord, read_record

    path = tmp_path / "test_results.json"
    path.write_text(text)
    if config is not None:
        path.with_name("config.yaml").write_text(config)
    with pytest.raises(UnreadableRecord) as error:
        read_record(path)
    assert str(error.value).startswith(f"{path} {reason}")
    assert "\n" not in str(error.value)
    assert error.value.path == path
    assert isinstance(error.value, ValueError)


def test_a_readable_record_comes_with_its_config(tmp_path: Path) -> None:
    from lightning_episodes.evaluation.record import read_record

    path = tmp_path / "test_results.json"
    path.write_text(json.dumps({"accuracy": 0.5, "ci95": 0.1}))
    assert read_record(path) == ({"accuracy": 0.5, "ci95": 0.1}, None)
    path.with_name("config.yaml").write_text("seed_everything: 3\n")
    assert read_record(path)[1] == {"seed_everything": 3}
