"""The record of a test run: its files, their names and their fields, defined once.

A test writes, into the logger's folder (:class:`~lightning_episodes.callbacks.TestResultsWriter`):

- :data:`RESULTS_FILE` (``test_results.json``): the fields of :func:`results_record`;
- :data:`SCORES_FILE` (``test_episodes.csv``): each test episode's identity, difficulty and accuracy, a
  :class:`~lightning_episodes.evaluation.DifficultyTable` (:func:`scores_table`);

and LightningCLI saves the run's configuration beside them as :data:`CONFIG_FILE` (``config.yaml``).
``lightning-episodes report`` reads the records (:func:`read_record`, :mod:`lightning_episodes.analysis.report`),
``compare`` the records and the tables.
"""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, Final

import torch
import yaml

from lightning_episodes.algorithms.loading import read_checkpoint
from lightning_episodes.algorithms.metrics import ScoredEpisodes
from lightning_episodes.data.datamodule import EpisodicDataModule
from lightning_episodes.evaluation.scoring import scoring_identities
from lightning_episodes.evaluation.tables import DifficultyTable

__all__ = [
    "CONFIG_FILE",
    "CPU_FLAGS",
    "DEFAULT_PRECISION",
    "ENVIRONMENT_PACKAGES",
    "LEGACY_SAMPLING_DEFAULTS",
    "RESULTS_FILE",
    "SCORES_FILE",
    "BF16_EXTENSIONS",
    "UnreadableRecord",
    "bf16_extensions",
    "checkpoint_step",
    "environment",
    "native_bf16",
    "plain",
    "processor",
    "read_record",
    "scenario_hash",
    "results_record",
    "scores_table",
]

#: The record of a test: the fields of :func:`results_record`, as JSON.
RESULTS_FILE: Final = "test_results.json"
#: Each test episode's identity, difficulty and accuracy (a :class:`~lightning_episodes.evaluation.DifficultyTable`).
SCORES_FILE: Final = "test_episodes.csv"
#: The run's configuration, saved by LightningCLI beside the record.
CONFIG_FILE: Final = "config.yaml"

#: The weighting callback's defaults for records that do not carry their own ``sampling_defaults`` (written before
#: they did, or read from a ``config.yaml`` alone): the defaults of the versions that wrote them. A record written
#: now names the defaults of the callback that ran (:func:`results_record`), so a default changed later does not
#: relabel older runs.
LEGACY_SAMPLING_DEFAULTS: Final[Mapping[str, Any]] = {
    "target": "uniform",
    "decay": 0.9,
    "warmup_steps": 100,
    "support_sigmas": 2.58,
    "out_of_support": "zero",
    "normalization": "ess",
    "update": "episode",
    "estimate": "online",
    "proposal": "normal",
    "window": 1000,
    "running_decay": 0.99,
    "shuffle_weights": False,
    "seed": 0,
    "log_grad_norm": False,
    "reference_checkpoint": None,
    "offline_episodes": 1000,
    "histogram_every_n_steps": 0,
    "name": "",
    "mode": "reweight",
    "pool": 4,
    "replacement": True,
}


def plain(values: Mapping[str, Any], components: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON-friendly (scalar) entries of a hyper-parameter dict, and those named in ``components`` that are a
    class path with its ``init_args`` (``{"class_path": ..., "init_args": {...}}``, its scalar arguments kept)."""
    kept: dict[str, Any] = {k: v for k, v in values.items() if isinstance(v, int | float | str | bool) or v is None}
    for name in components:
        value = values.get(name)
        if isinstance(value, Mapping) and isinstance(value.get("class_path"), str):
            kept[name] = {"class_path": value["class_path"], "init_args": plain(value.get("init_args") or {})}
    return kept


def scenario_hash(hparams: Mapping[str, Any], data: Mapping[str, Any]) -> str:
    """Identifies a scenario: the same model and data settings give the same hash, whatever the seed of the
    training episodes (``data.train_seed``; runs of one scenario with different seeds share it)."""
    scenario = [dict(hparams), {key: value for key, value in data.items() if key != "train_seed"}]
    return hashlib.sha256(json.dumps(scenario, sort_keys=True).encode()).hexdigest()[:16]


def checkpoint_step(ckpt_path: str | Path | None) -> int:
    """The global step recorded in ``ckpt_path`` (0 without one): the step of the weights a ``test`` alone evaluates,
    whose Trainer has not trained."""
    if not ckpt_path:
        return 0
    return int(read_checkpoint(ckpt_path).get("global_step") or 0)


#: The packages whose versions a record keeps (what its numbers depend on, beyond the code of this library).
ENVIRONMENT_PACKAGES: Final = ("lightning-episodes", "torch", "pytorch-lightning", "numpy", "pillow")


#: The instruction-set extensions of a CPU that a record names (those it has): they choose PyTorch's and oneDNN's
#: kernels, so the same run may round differently on processors that differ in them.
CPU_FLAGS: Final = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8")
#: Lightning's default precision: what a record that names none (an older one, or one without a Trainer) was made with.
DEFAULT_PRECISION: Final = "32-true"


def _first_processor(cpuinfo: str | None) -> dict[str, str]:
    """The fields of the first processor of ``cpuinfo`` (``None``: this machine's ``/proc/cpuinfo``; without one,
    none): every core of a machine is the same model."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def processor(cpuinfo: str | None = None) -> tuple[str, str]:
    r"""The CPU's model name and which of :data:`CPU_FLAGS` it has (space-separated, in that order), from the first
    processor of ``cpuinfo`` (``None``: this machine's ``/proc/cpuinfo``; without one, the platform's processor name
    and no flags).

    Example::

        >>> processor("model name : Intel(R) Xeon(R) Gold 6430\nflags : fpu sse2 avx2 amx_tile avx512f\n")
        ('Intel(R) Xeon(R) Gold 6430', 'avx2 avx512f amx_tile')
    """
    fields = _first_processor(cpuinfo)
    name = fields.get("model name") or platform.processor() or platform.machine()
    present = set(fields.get("flags", "").split())
    return name, " ".join(flag for flag in CPU_FLAGS if flag in present)


#: Where ``/proc/cpuinfo`` lists a CPU's instruction-set extensions (x86: ``flags``, Arm: ``Features``), the extensions
#: there that compute in bfloat16, and their names in words.
BF16_EXTENSIONS: Final = {
    "flags": (("avx512_bf16", "amx_bf16"), "AVX-512 BF16 or AMX"),
    "Features": (("bf16",), "BF16"),
}


def _bf16_field(cpuinfo: str | None) -> tuple[bool, str] | None:
    """Whether the first processor of ``cpuinfo`` has bfloat16 instructions, and their names on its architecture
    (:data:`BF16_EXTENSIONS`); ``None`` where ``cpuinfo`` lists no extensions."""
    fields = _first_processor(cpuinfo)
    for field, (extensions, words) in BF16_EXTENSIONS.items():
        if field in fields:
            return not set(extensions).isdisjoint(fields[field].split()), words
    return None


def native_bf16(cpuinfo: str | None = None) -> bool | None:
    r"""Whether the CPU has bfloat16 instructions, from the first processor of ``cpuinfo`` (``None``: this machine's
    ``/proc/cpuinfo``): on x86 AVX-512 BF16 or AMX (``flags``), on Arm the ``bf16`` feature (``Features``); ``None``
    where ``cpuinfo`` names neither list (another system). Without them PyTorch emulates bfloat16 in float32 arithmetic,
    several times slower than float32 itself.

    Example::

        >>> native_bf16("flags : fpu avx2 avx512f\n"), native_bf16("flags : avx2 amx_bf16\n"), native_bf16("")
        (False, True, None)
    """
    found = _bf16_field(cpuinfo)
    return None if found is None else found[0]


def bf16_extensions(cpuinfo: str | None = None) -> str | None:
    r"""The names of the bfloat16 instructions of the CPU's architecture (whether or not it has them), from
    ``cpuinfo`` as :func:`native_bf16` reads it; ``None`` where it lists no extensions.

    Example::

        >>> bf16_extensions("flags : fpu avx2\n"), bf16_extensions("Features : fp asimd\n"), bf16_extensions("")
        ('AVX-512 BF16 or AMX', 'BF16', None)
    """
    found = _bf16_field(cpuinfo)
    return None if found is None else found[1]


def environment(device: torch.device | str | None = None, precision: str = DEFAULT_PRECISION) -> dict[str, str]:
    """Where and how a record was made: Python's and :data:`ENVIRONMENT_PACKAGES`' versions, the CPU's model
    (``cpu``) and instruction-set extensions (``cpu_flags``, :func:`processor`), the ``accelerator`` (the device type:
    ``cpu``, ``cuda``, ``mps``) and, on CUDA, its name (``device``), and the Trainer's ``precision`` (``32-true``,
    ``bf16-mixed``). A record's numbers are bit-reproducible only with the same versions, processor and precision.

    Args:
        device: where the test ran (``None``: the CPU).
        precision: the Trainer's ``precision``, as ``trainer.precision`` names it.
    """
    name, flags = processor()
    found = {"python": platform.python_version(), "cpu": name, "cpu_flags": flags}
    for package in ENVIRONMENT_PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    device = torch.device(device) if device is not None else torch.device("cpu")
    found["accelerator"] = device.type
    if device.type == "cuda" and torch.cuda.is_available():
        found["device"] = torch.cuda.get_device_name(device)
    found["precision"] = str(precision)
    return found


def results_record(
    results: Mapping[str, float],
    algorithm: str,
    hparams: Mapping[str, Any],
    data: Mapping[str, Any],
    *,
    eval_batch_norm: str | None,
    global_step: int,
    ckpt_path: str | Path | None,
    seed: int | None,
    sampling: Mapping[str, Any] | None,
    sampling_defaults: Mapping[str, Any] | None,
    trained_on: Mapping[str, Any] | None,
    validation: list[list[float]],
    weighted_steps: int | None = None,
    made_with: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The fields of :data:`RESULTS_FILE`.

    Args:
        results: the module's logged ``test/acc``, ``test/acc_ci95``, ``test/loss`` and ``test/episodes``.
        algorithm: the module's class name.
        hparams: the module's hyper-parameters (only their scalars are kept).
        data: the data module's hyper-parameters (their scalars are kept, and the task sampler as its ``class_path``
            and ``init_args``).
        eval_batch_norm: the batch norm at evaluation (``running``/``episode``).
        global_step: the step of the tested weights.
        ckpt_path: the tested checkpoint, if any.
        seed: the run's ``seed_everything``, if any.
        sampling: every option of the weighting callback (``None``: plain sampling).
        sampling_defaults: the defaults of those options, so that a report names the options that differ.
        trained_on: the data the model was trained on, as its checkpoint recorded it.
        validation: ``[step, val/acc]`` of every validation of the fit, in step order.
        weighted_steps: the training steps of the tested weights whose weights came from the weighting callback's
            ``q`` (0: the run never weighted, e.g. a warm-up as long as the run; ``None``: no callback, or unknown).
        made_with: :func:`environment` where the test ran (``None``: this process's, on the CPU in
            :data:`DEFAULT_PRECISION`).
    """
    hparams, data = plain(hparams), plain(data, components=("task_sampler",))
    return {
        "algorithm": algorithm,
        "accuracy": results["test/acc"],
        "ci95": results["test/acc_ci95"],
        "loss": results["test/loss"],
        "episodes": int(results["test/episodes"]),
        "eval_batch_norm": eval_batch_norm,
        "global_step": global_step,
        "ckpt_path": None if ckpt_path is None else str(ckpt_path),
        "seed": seed,
        "sampling": None if sampling is None else dict(sampling),
        "sampling_defaults": None if sampling_defaults is None else dict(sampling_defaults),
        "weighted_steps": weighted_steps,
        "environment": dict(made_with) if made_with is not None else environment(),
        "trained_on": None if trained_on is None else dict(trained_on),
        "hparams": hparams,
        "data": data,
        "config_hash": scenario_hash(hparams, data),
        "validation": validation,
    }


class UnreadableRecord(ValueError):
    """A :data:`RESULTS_FILE` that cannot be read as a test record: unreadable, empty, not JSON, without its fields,
    or beside a :data:`CONFIG_FILE` that is not YAML. The message names the file and why, in one line.

    Args:
        path: the record.
        reason: what is wrong with it, a phrase that follows its path (``is empty (0 bytes)``).
    """

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path} {reason}")
        self.path = path


def read_record(path: Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A test record's fields (:func:`results_record`'s) and the run's configuration beside it (``None`` without one).

    Raises:
        UnreadableRecord: naming the record, if it or its configuration cannot be read, or it is not a test record
            (no numbers ``accuracy`` and ``ci95``).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UnreadableRecord(path, f"cannot be read: {getattr(error, 'strerror', None) or error}") from None
    if not text.strip():  # a test killed while writing it, or a copy cut short
        raise UnreadableRecord(path, f"is empty ({len(text.encode())} bytes)")
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise UnreadableRecord(path, f"is not valid JSON: {error}") from None
    values = [record.get(key) for key in ("accuracy", "ci95")] if isinstance(record, dict) else [None]
    if not all(isinstance(value, int | float) and not isinstance(value, bool) for value in values):
        raise UnreadableRecord(path, "is not a test record: it needs the numbers 'accuracy' and 'ci95'")
    config_path = path.with_name(CONFIG_FILE)
    if not config_path.is_file():
        return record, None
    try:
        config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise UnreadableRecord(path, f"has a {CONFIG_FILE} beside it that cannot be read: {first}") from None
    return record, config if isinstance(config, dict) else {}


def scores_table(datamodule: object, scores: ScoredEpisodes | None) -> DifficultyTable | None:
    """A test's per-episode scores with the episodes' identities (:data:`SCORES_FILE`), or ``None`` if the test did
    not score an :class:`~lightning_episodes.EpisodicDataModule`'s fixed test episodes ``0..n-1`` (another data
    module, or ``limit_test_batches``)."""
    if scores is None or not len(scores.episode_ids) or not isinstance(datamodule, EpisodicDataModule):
        return None
    count = len(scores.episode_ids)
    if not torch.equal(scores.episode_ids, torch.arange(count)):
        return None
    identity = scoring_identities(datamodule, "test", count)
    return DifficultyTable.from_arrays(
        identity.episode_ids, identity.classes, identity.support_indices, identity.query_indices,
        scores.difficulty, scores.accuracy,
    )  # fmt: skip
