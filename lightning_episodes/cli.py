"""The ``lightning-episodes`` command line: LightningCLI over every algorithm and data module."""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import importlib
import logging
import signal
import sys
import warnings
from pathlib import Path
from typing import Any, NoReturn

import pytorch_lightning as pl
import torch
import yaml
from jsonargparse import ActionConfigFile, Namespace
from pytorch_lightning.callbacks import Callback, Checkpoint, ModelCheckpoint
from pytorch_lightning.cli import LightningArgumentParser, LightningCLI
from pytorch_lightning.utilities import rank_zero_info, rank_zero_only
from pytorch_lightning.utilities.exceptions import SIGTERMException
from typing_extensions import override

# importing them registers every algorithm, callback and dataset, so LightningCLI accepts their short names
import lightning_episodes.algorithms
import lightning_episodes.callbacks
import lightning_episodes.data  # noqa: F401
from lightning_episodes.algorithms.base import EpisodicModule
from lightning_episodes.algorithms.loading import (
    CheckpointError,
    check_class_path,
    check_recorded_classes,
    read_checkpoint,
    state_dict_mismatch,
)
from lightning_episodes.algorithms.schedules import check_schedule
from lightning_episodes.callbacks.checkpointing import (
    ResumableCheckpoint,
    checkpoint_callback,
    continue_logger_version,
    last_checkpoints,
)
from lightning_episodes.callbacks.defaults import default_callbacks
from lightning_episodes.callbacks.preemption import PreemptionHandler
from lightning_episodes.cli_checks import (
    backbone_class_path,
    check_accelerator,
    check_backbone,
    check_memory,
    check_precision,
    check_world_size,
    own_outputs,
)
from lightning_episodes.cli_imports import add_import_option, import_components
from lightning_episodes.cli_runs import CONFIG_NAME, callback_class, check_dirpath_free, pick_run
from lightning_episodes.commands.configs import CONFIG_HELP, ConfigFileOrName
from lightning_episodes.console import TOOLS, TRAINER_COMMANDS, Preempted, run, suggest_options
from lightning_episodes.data.datamodule import EpisodicDataModule
from lightning_episodes.run_folder import OutputPathError

#: The checkpoint callback of every run whose ``trainer.callbacks`` lists no ``ModelCheckpoint``: the best checkpoint
#: by validation accuracy (``best-<step>-<val acc>.ckpt``) and ``last.ckpt``, the latest state every 100 steps, in
#: ``<log dir>/checkpoints`` (a folder per run). A config that lists a ``ModelCheckpoint`` of its own (the
#: quickstart's, with its ``dirpath``) keeps it instead; ``trainer.enable_checkpointing: false`` turns both off.
DEFAULT_CHECKPOINT: dict[str, Any] = {
    "class_path": "lightning_episodes.callbacks.ResumableCheckpoint",
    "init_args": {
        "monitor": "val/acc",
        "mode": "max",
        "filename": "best-{step}-{val/acc:.4f}",
        "auto_insert_metric_name": False,
        "save_last": True,
        "last_every_n_steps": 100,
    },
}


def _is_checkpoint(callback: Any) -> bool:
    """Whether a ``trainer.callbacks`` entry (a parsed ``class_path``/``init_args`` or an object) is a
    ``ModelCheckpoint``."""
    cls = callback_class(callback)
    return cls is not None and issubclass(cls, ModelCheckpoint)


def add_default_checkpoint(config: Namespace) -> None:
    """Put :data:`DEFAULT_CHECKPOINT` first in ``config.trainer.callbacks`` if that list has no ``ModelCheckpoint``
    (and ``trainer.enable_checkpointing`` is not ``false``)."""
    trainer = config.get("trainer")
    if not isinstance(trainer, Namespace) or trainer.get("enable_checkpointing") is False:
        return
    callbacks = trainer.get("callbacks") or []
    callbacks = list(callbacks) if isinstance(callbacks, list) else [callbacks]
    if not any(_is_checkpoint(callback) for callback in callbacks):
        init_args = Namespace(**DEFAULT_CHECKPOINT["init_args"])
        trainer["callbacks"] = [Namespace(class_path=DEFAULT_CHECKPOINT["class_path"], init_args=init_args), *callbacks]


#: Where ``fit``, ``validate`` and ``test`` write when no ``--config`` is given and ``trainer.default_root_dir`` is not
#: set: ``runs/<the model's class name, lower case>``, beside the configs' ``runs/<name>`` (Lightning's default is
#: ``./lightning_logs``).
NO_CONFIG_ROOT = "runs"


def no_config_defaults(config: Namespace, subcommand: str | None, top: Namespace | None = None) -> str | None:
    """Give a run without any ``--config`` its output folder under :data:`NO_CONFIG_ROOT`, and say what it runs.

    Nothing changes when a ``--config`` (in ``top``, the whole command line's config, or in ``config``) or
    ``--trainer.default_root_dir`` is given, nor without a subcommand (``main(..., run=False)`` builds objects in
    Python, as a ``pl.Trainer`` would).

    Returns:
        For ``fit`` without a config: one line naming the sizes it trains with (the data module's and the model's
        defaults are the paper's) and where it writes; ``None`` otherwise.
    """
    trainer, model = config.get("trainer"), config.get("model")
    given = [config.get("config"), top.get("config") if top is not None else None]
    if subcommand is None or any(given) or not isinstance(trainer, Namespace):
        return None
    if trainer.get("default_root_dir") is not None:
        return None
    model_name = str(model.get("class_path") or "") if isinstance(model, Namespace) else ""
    name = model_name.rpartition(".")[2] or "model"
    trainer["default_root_dir"] = f"{NO_CONFIG_ROOT}/{name.lower()}"
    if subcommand != "fit":
        return None
    backbone = model.get("init_args", Namespace()).get("backbone") if isinstance(model, Namespace) else None
    if isinstance(backbone, Namespace):
        backbone = str(backbone.get("class_path", "")).rpartition(".")[2]
    data = config.get("data")
    sizes = data.get("init_args") if isinstance(data, Namespace) else None
    what = f"{name} {backbone}" if backbone else name
    if isinstance(sizes, Namespace) and sizes.get("ways") is not None:
        what += (
            f", {sizes.get('dataset')} {sizes.get('ways')}-way {sizes.get('shots')}-shot, "
            f"{sizes.get('episodes_per_batch')} episodes x {sizes.get('queries')} queries a step"
        )
    steps = trainer.get("max_steps")
    what += f", max_steps {steps}" if isinstance(steps, int) and steps > 0 else ", no max_steps"
    where = trainer["default_root_dir"]
    return f"fit without --config: {what}; writing under {where} (--config quickstart is sized for a CPU)"


@rank_zero_only
def _to_stderr(line: str) -> None:
    """One line on standard error, from the first process only (not through logging, which a user may quieten)."""
    sys.stderr.write(f"{line}\n")


class EpisodicParser(LightningArgumentParser):
    """Shows a configuration as it runs (``--print_config``, the run's ``config.yaml``): with the default
    checkpoint callback that :class:`EpisodicCLI` adds. Its ``--config`` also takes a shipped config's name
    (:class:`~lightning_episodes.commands.configs.ConfigFileOrName`).

    Every option is named in full: argparse would otherwise take ``--trainer.max_step 10`` for
    ``--trainer.max_steps`` (a prefix of one option), and a typo would run. jsonargparse builds every parser of the
    command line from this class (the subcommands' parsers, which also copy ``allow_abbrev`` from the main one, and
    those of the classes in ``init_args``), so all refuse abbreviations. An unknown option is an error naming the
    nearest valid ones (:func:`~lightning_episodes.console.suggest_options`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    @override
    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        # a config file's unknown key is found by the main parser, which names the subcommand's parser
        parser = getattr(ex, "subcommand_parser", None)
        names = (parser if isinstance(parser, EpisodicParser) else self)._option_names()
        super().error(suggest_options(message, names), ex)

    def _option_names(self) -> list[str]:
        """The option strings a user may give (not ``--x.help``, nor ``--x+``, jsonargparse's form for appending)."""
        return [
            option
            for option, action in self._option_string_actions.items()
            if not isinstance(action, argparse._HelpAction) and not option.endswith((".help", "+"))
        ]

    @override
    def add_argument(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("action") is ActionConfigFile:
            kwargs.update(action=ConfigFileOrName, help=CONFIG_HELP)
        return super().add_argument(*args, **kwargs)

    @override
    def dump(self, cfg: Namespace, *args: Any, **kwargs: Any) -> str:
        if isinstance(cfg, Namespace) and isinstance(cfg.get("trainer"), Namespace):
            cfg = cfg.clone()
            add_default_checkpoint(cfg)
        if "skip_none" in kwargs:  # Lightning's name for it, deprecated in jsonargparse 4.49 (it warned at this line)
            kwargs["skip_unset"] = kwargs.pop("skip_none")
        return super().dump(cfg, *args, **kwargs)


class EpisodicCLI(LightningCLI):
    """LightningCLI with the data module's image shape and ways linked into the model, and a checkpoint callback in
    every run.

    ``data.channels``, ``data.image_size`` and ``data.ways`` are the single source of the input shape and
    the number of classes, so a model is always built for the episodes it will see. There is no default
    model: ``--model ProtoNet`` (or a config's ``model.class_path``) picks one with its own defaults.

    A run whose ``trainer.callbacks`` has no ``ModelCheckpoint`` gets :data:`DEFAULT_CHECKPOINT` first in the list
    (so a sampling config lists its weighting callback alone, which stays the last of the list);
    ``--print_config`` and the run's saved ``config.yaml`` show it. Every Trainer also gets the
    :func:`~lightning_episodes.callbacks.default_callbacks` it lacks (a non-finite guard and the test record's
    writer), which the saved configuration does not list.
    """

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """``fit``, ``validate`` and ``test``: Lightning's ``predict`` needs a ``predict_step``, which episodic
        models do not have (``lightning-episodes predict`` is :mod:`lightning_episodes.inference`)."""
        return {name: skip for name, skip in LightningCLI.subcommands().items() if name in TRAINER_COMMANDS}

    def add_arguments_to_parser(self, parser: Any) -> None:
        parser.link_arguments("data.init_args.channels", "model.init_args.in_channels")
        parser.link_arguments("data.init_args.image_size", "model.init_args.image_size")
        # the head of MAML/ANIL has one output per class; algorithms without `ways` ignore the link
        parser.link_arguments("data.init_args.ways", "model.init_args.ways")
        parser.set_defaults(
            {
                "data": {"class_path": "lightning_episodes.data.EpisodicDataModule"},
            }
        )
        parser.add_argument(
            "--test_after_fit",
            type=bool,
            default=False,
            help="After `fit`, test the best checkpoint (by the ModelCheckpoint monitor) in the same process.",
        )
        add_import_option(parser)

    @override
    def instantiate_trainer(self, **kwargs: Any) -> pl.Trainer:
        """The configured Trainer, with :func:`~lightning_episodes.callbacks.default_callbacks` that its callbacks
        lack (before the checkpoint callbacks, which Lightning keeps last)."""
        trainer = super().instantiate_trainer(**kwargs)
        callbacks: list[Callback] = trainer.callbacks  # type: ignore[attr-defined]
        at = next((i for i, callback in enumerate(callbacks) if isinstance(callback, Checkpoint)), len(callbacks))
        callbacks[at:at] = default_callbacks(callbacks)
        return trainer

    @override
    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        if self.parser_class is LightningArgumentParser:
            self.parser_class = EpisodicParser
        return super().init_parser(**kwargs)

    @override
    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        note = no_config_defaults(config, self.subcommand, self.config)
        if note is not None:
            _to_stderr(note)
        add_default_checkpoint(config)
        check_accelerator(config.get("trainer"))
        check_backbone(config.get("model"))

    # -- --ckpt_path: `last`, `best` and broken files, resolved before Lightning sees them ------------------------
    @override
    def parse_arguments(self, parser: Any, args: Any) -> None:
        super().parse_arguments(parser, args)
        # LightningCLI reads the hyper-parameters of a --ckpt_path file right after parsing: check the file first
        subcommand = self.config.get("subcommand")
        value = self.config[subcommand].get("ckpt_path") if subcommand else None
        if value is not None and value not in ("last", "best") and Path(value).exists():
            try:
                self._check_checkpoint_model(read_checkpoint(value), value, subcommand)
            except CheckpointError as error:
                parser.error(f"--ckpt_path {value}: {error}")

    def _check_checkpoint_model(self, checkpoint: dict[str, Any], path: str, subcommand: str) -> None:
        """Refuse a checkpoint whose recorded model class is outside this library and the configured ``--model``'s
        module, before LightningCLI imports it; say so when the checkpoint's algorithm replaces the configured one."""
        model = self.config[subcommand].get("model")
        configured = model.get("class_path") if isinstance(model, Namespace) else None
        # the modules the user named: the configured model's and backbone's
        named = [configured, backbone_class_path(model)] if isinstance(configured, str) else []
        allowed = [name.rpartition(".")[0] for name in named if name]
        data = self.config[subcommand].get("data")
        data_class = data.get("class_path") if isinstance(data, Namespace) else None
        check_recorded_classes(
            checkpoint, f"checkpoint {path}", [*allowed, *([data_class.rpartition(".")[0]] if data_class else [])]
        )
        hparams = checkpoint.get("hyper_parameters") or {}
        record = checkpoint.get("lightning_episodes") or {}
        recorded = hparams.get("_class_path") if isinstance(hparams, dict) else None
        for class_path in (recorded, record.get("class_path") if isinstance(record, dict) else None):
            if class_path is not None:
                check_class_path(class_path, allowed, f"checkpoint {path}")
        if isinstance(recorded, str) and isinstance(configured, str):
            saved, given = recorded.rpartition(".")[2], configured.rpartition(".")[2]
            if saved != given:
                rank_zero_info(
                    f"note: --ckpt_path {path} holds a {saved} model: {subcommand} runs {saved}, not {given}"
                )

    def _resolve_ckpt_path(self, subcommand: str) -> None:
        """Turn ``--ckpt_path last|best|FILE`` into a checked file, or stop with one message naming what is wrong.

        ``last`` is the newest ``last.ckpt`` that this configuration's checkpoint callback writes (a run folder of
        the logger's when it has no ``dirpath``; :func:`~lightning_episodes.callbacks.checkpointing.last_checkpoints`)
        whose run was made with this command's config (:mod:`lightning_episodes.cli_runs`), and ``fit`` continues in
        that run folder. ``best`` is the best checkpoint recorded in that ``last.ckpt`` (Lightning only knows "best"
        inside ``fit``), which must be in the same folder: only the run's own record is followed (one run owns a
        checkpoint folder at a time, :mod:`lightning_episodes.run_folder`). Lightning itself would start over from
        scratch, with exit code 0, when it finds no ``last`` checkpoint, and give a raw traceback for a broken file
        or one of another model. A ``fit`` without ``--ckpt_path`` is refused when its checkpoint ``dirpath`` holds
        a run of another config.
        """
        config = self.config_init[subcommand]
        value = config.get("ckpt_path")
        if value is None and subcommand == "fit":
            self._check_dirpath_free()
        if value is None or str(value) == "hpc" or str(value).startswith("registry"):
            return
        try:
            if value in ("last", "best"):
                last = pick_run(last_checkpoints(self.trainer), self._run_config(subcommand))
                path = last if value == "last" else self._best_recorded_in(last)
            else:
                path = Path(value)
            checkpoint = read_checkpoint(path)
            if value in ("last", "best"):  # a file named by the user was checked when the arguments were parsed
                self._check_checkpoint_model(checkpoint, str(path), subcommand)
        except (FileNotFoundError, CheckpointError) as error:
            self.parser.error(f"--ckpt_path {value}: {error}")
        callback = checkpoint_callback(self.trainer)
        if subcommand == "fit" and isinstance(callback, ResumableCheckpoint):
            callback.resume_path = path
        if value == "last" and subcommand == "fit":
            step = int(checkpoint.get("global_step", 0))
            if callback is not None and callback.dirpath is None:
                continue_logger_version(self.trainer, path.parent.parent, step)
            elif callback is not None:  # checkpoints in a dirpath of their own: the log folder they recorded
                state = (checkpoint.get("callbacks") or {}).get(callback.state_key)
                log_dir = state.get("log_dir") if isinstance(state, dict) else None
                if isinstance(log_dir, str) and Path(log_dir).is_dir():
                    continue_logger_version(self.trainer, Path(log_dir), step)
        rank_zero_info(f"--ckpt_path {value}: {path}")
        config["ckpt_path"] = str(path)

    def _run_config(self, subcommand: str) -> dict[str, Any]:
        """This command's config as its run's ``config.yaml`` holds it (LightningCLI's ``SaveConfigCallback``)."""
        dumped = self._parser(subcommand).dump(self.config[subcommand], skip_none=False)
        return dict(yaml.safe_load(dumped) or {})

    def _check_dirpath_free(self) -> None:
        """Stop a fresh fit whose checkpoint ``dirpath`` holds another config's run, before anything is written."""
        callback = checkpoint_callback(self.trainer)
        if callback is None or callback.dirpath is None or not Path(callback.dirpath).is_dir():
            return
        try:
            check_dirpath_free(Path(callback.dirpath), self._run_config("fit"))
        except ValueError as error:
            self.parser.error(f"trainer.callbacks: {error}")

    def _best_recorded_in(self, last: Path) -> Path:
        """The best checkpoint that the checkpoint callback recorded in ``last``."""
        states = read_checkpoint(last).get("callbacks") or {}
        callback = checkpoint_callback(self.trainer)
        state = states.get(callback.state_key) if callback is not None else None
        candidates = [state] if isinstance(state, dict) else [s for s in states.values() if isinstance(s, dict)]
        best = next((str(s["best_model_path"]) for s in candidates if s.get("best_model_path")), "")
        if not best:
            raise FileNotFoundError(f"{last} records no best checkpoint (did the run validate?)")
        if Path(best).absolute().parent != last.absolute().parent:
            # a record copied or moved from another run's folder: not this run's best
            raise FileNotFoundError(f"{last} records the best checkpoint {best}, outside its own folder {last.parent}")
        if not Path(best).is_file():
            raise FileNotFoundError(f"{last} records the best checkpoint {best}, which does not exist")
        return Path(best)

    # -- before a subcommand runs: devices, --ckpt_path, output folders (checked and owned) ----------------------
    @override
    def _run_subcommand(self, subcommand: str) -> None:
        # the output folders' lock (taken in before_<subcommand>) is released however the subcommand ends
        with contextlib.ExitStack() as self._outputs:
            try:
                super()._run_subcommand(subcommand)
            except SIGTERMException:
                # Lightning ends the fit with a SystemExit of status 0: a preempted run must not look finished
                self._stop(subcommand, self._stopped_by())
            except (KeyboardInterrupt, SystemExit) as stop:
                # Ctrl-C that no PreemptionHandler turned into a stop (twice, or outside the training loop): raised
                # as it is, or turned by Lightning into exit(1) after "attempting graceful shutdown"
                if isinstance(stop, SystemExit) and not isinstance(stop.__context__, KeyboardInterrupt):
                    raise
                self._stop(subcommand, signal.SIGINT)
            except RuntimeError as error:
                mismatch = state_dict_mismatch(error)
                if mismatch is None:
                    raise
                path = self.config_init[subcommand].get("ckpt_path")
                self.parser.error(
                    f"--ckpt_path {path}: checkpoint {path} does not fit the model of this config ({mismatch}): was "
                    "it trained with another config? name a checkpoint of this config, or use the config of its run"
                )
            except OSError as error:
                if subcommand != "fit" or not _no_space(error):
                    raise
                # the disk filled up while writing a checkpoint or a log: from where, and how, the run goes on
                message = str(error) if isinstance(error, OutputPathError) else f"{error.filename}: {error.strerror}"
                resume = self._last_written(first="free some space, then ")
                raise OutputPathError(f"{message}; {resume}", error.filename or "") from error

    def _stopped_by(self) -> signal.Signals:
        """The signal that stopped the fit: :class:`~lightning_episodes.callbacks.PreemptionHandler`'s, or SIGTERM
        (which Lightning's own handler turns into a ``SIGTERMException``)."""
        handlers = (cb for cb in self.trainer.callbacks if isinstance(cb, PreemptionHandler))  # type: ignore[attr-defined]
        return next((handler.stopped_by for handler in handlers if handler.stopped_by is not None), signal.SIGTERM)

    def _stop(self, subcommand: str, signum: signal.Signals) -> NoReturn:
        # one line, from the process that wrote the checkpoint (the others exit with the same status)
        message = self._preempted(subcommand, signum) if self.trainer.is_global_zero else ""
        raise Preempted(message, status=128 + signum) from None

    def _preempted(self, subcommand: str, signum: signal.Signals) -> str:
        """What a run stopped by a signal tells its user: the step, where that state is, how to resume."""
        step, name = self.trainer.global_step, signum.name
        if subcommand != "fit":
            return f"stopped by {name} before the end; nothing was written (run the same command again)"
        tested = ", not tested" if self.config[subcommand].get("test_after_fit") else ""
        return f"stopped by {name} at step {step} of {self.trainer.max_steps}{tested}: {self._last_written(step)}"

    def _last_written(self, step: int | None = None, first: str = "") -> str:
        """The ``last.ckpt`` this fit wrote, the step it holds (``that step`` if it is ``step``), and how to resume
        from it (after ``first``: ``"free some space, then "``)."""
        callback = checkpoint_callback(self.trainer)
        last = getattr(callback, "last_model_path", "") if callback is not None else ""
        if callback is None:
            return "no checkpoint was written (trainer.enable_checkpointing or a checkpoint callback is off)"
        if not last or not Path(last).is_file():
            return f"no checkpoint was written yet ({first}run the same command again)"
        written = int(read_checkpoint(last).get("global_step", -1))
        held = "that step" if written == step else f"step {written}"
        return f"{last} holds {held}; {first}resume with the same command and --ckpt_path last"

    def _before(self, subcommand: str) -> None:
        check_world_size(self.trainer, self.datamodule)
        check_memory(self.trainer, self.model, self.datamodule, subcommand)
        check_precision(self.trainer)
        self._resolve_ckpt_path(subcommand)
        if self.trainer.global_rank == 0:  # once, not in every process of a distributed run
            self._outputs.enter_context(own_outputs(self.trainer, lock=subcommand == "fit"))

    def before_fit(self) -> None:
        self._check_optimisation()
        self._before("fit")

    def _check_optimisation(self) -> None:
        """Build the optimiser and the schedule on a probe parameter: a bad argument (``lr -1``) or a schedule that
        anneals to ``max_steps`` fails here in one line naming the option, before any folder is written or process
        started, not as a traceback from ``configure_optimizers``."""
        probe = [torch.zeros(1, requires_grad=True)]
        optimizer: torch.optim.Optimizer = torch.optim.SGD(probe, lr=1.0)
        for option in ("optimizer", "lr_scheduler"):
            factory = getattr(self.model, option, None)
            if factory is None:
                continue
            try:
                built = factory(probe if option == "optimizer" else optimizer)
            except (ValueError, TypeError) as error:
                name = _factory_name(factory)
                raise ValueError(f"model.{option}{f' ({name})' if name else ''}: {error}") from None
            if option == "optimizer":
                optimizer = built
            else:
                check_schedule(built, self.trainer.max_steps)

    def before_test(self) -> None:
        self._before("test")

    def before_validate(self) -> None:
        self._before("validate")

    def after_fit(self) -> None:
        if self.config[self.subcommand].get("test_after_fit"):
            has_best = self.trainer.checkpoint_callback is not None and bool(
                getattr(self.trainer.checkpoint_callback, "best_model_path", "")
            )
            self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path="best" if has_best else None)


def _no_space(error: BaseException) -> bool:
    """Whether ``error`` or what it was raised from is a full disk (or a full quota)."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return any(isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT) for e in chain)


def _factory_name(factory: Any) -> str:
    """The class a factory builds: ``Adam`` for jsonargparse's ``partial(..., torch.optim.Adam, lr=...)`` or the
    class itself; ``""`` when it cannot tell."""
    if isinstance(factory, functools.partial):
        return next((item.__name__ for item in (factory.func, *factory.args) if isinstance(item, type)), "")
    return factory.__name__ if isinstance(factory, type) else ""


def run_tool(argv: list[str]) -> int | None:
    """Run ``argv[0]`` if it names one of :data:`TOOLS` (``None`` otherwise)."""
    if not argv or argv[0] not in TOOLS:
        return None
    return int(importlib.import_module(TOOLS[argv[0]][0]).main(argv[1:]) or 0)


def entry(argv: list[str] | None = None) -> int:
    """The ``lightning-episodes`` console script: ``fit|validate|test`` or one of :data:`TOOLS`; a user error is one
    line with exit status 2 (:mod:`lightning_episodes.console`).

    Args:
        argv: the arguments after the program name (``None``: ``sys.argv[1:]``).
    """
    return run(argv, main, TOOLS)  # the same as lightning_episodes.console.entry, the console script


class _NoAdvertisement(logging.Filter):
    """Drops Lightning's "💡 Tip" that advertises its cloud logger (printed by every Trainer without it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip")


def quiet_lightning() -> None:
    """Silence what Lightning prints in every run that no user of this command can act on: the advertisement of its
    cloud logger, the deprecation warnings raised inside Lightning itself (``LeafSpec``, from its own ``_pytree``;
    jsonargparse's, of what LightningCLI calls: ``add_instantiator``, ``instantiate_classes``, ``save(skip_none=)``),
    and its warning that ``args`` came with a command line (``main(args)`` runs in process: in a test, a notebook).
    Warnings and messages about the run itself are kept. Idempotent."""
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"pytorch_lightning\.cli$")
    warnings.filterwarnings(
        "ignore", "LightningCLI's args parameter is intended", UserWarning, r"pytorch_lightning\.cli$"
    )
    logger = logging.getLogger("pytorch_lightning.utilities.rank_zero")
    if not any(isinstance(existing, _NoAdvertisement) for existing in logger.filters):
        logger.addFilter(_NoAdvertisement())


def main(args: list[str] | None = None, exit_on_error: bool = True, run: bool = True) -> EpisodicCLI:
    """The LightningCLI (``fit``, ``validate``, ``test``), in process when ``args`` is given.

    Args:
        args: the command line after the program name (``None``: ``sys.argv[1:]``).
        exit_on_error: let the parser print its usage and exit on a bad argument (False: raise
            ``argparse.ArgumentError``, which the console script reports in one line).
        run: run the subcommand that ``args`` starts with; ``False``: ``args`` has no subcommand, and the model,
            data module and Trainer are only built (``cli.model``, ``cli.datamodule``, ``cli.trainer``).
    """
    quiet_lightning()
    # the modules of users' components, imported before their names are parsed (--import, entry points)
    args = import_components(sys.argv[1:] if args is None else args)
    parser_kwargs: dict[str, Any] | None = None
    if not exit_on_error:
        parser_kwargs = {"exit_on_error": False}
        if run:
            parser_kwargs.update({name: {"exit_on_error": False} for name in TRAINER_COMMANDS})
    return EpisodicCLI(
        EpisodicModule,
        EpisodicDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        auto_configure_optimizers=False,
        save_config_kwargs={"overwrite": True, "config_filename": CONFIG_NAME},
        parser_kwargs=parser_kwargs,
        args=args,
        run=run,
    )
