"""The ``lightning-episodes`` console script's front door: the top-level help, the dispatch to the tools, and
mistakes reported as one line.

A wrong argument, an invalid value (``--data.ways 0``) or a missing file is the user's to fix, not a crash:
the command prints a short usage line, ``<command>: error: <message naming the parameter>`` and a hint, and
exits with status 2 (as ``argparse`` does), with no traceback. ``LIGHTNING_EPISODES_DEBUG=1`` in the
environment shows the full traceback instead. An option that does not exist (or abbreviated: every option is named in
full) names the nearest valid ones. A run stopped by ``SIGTERM`` (a scheduler's preemption), ``SIGINT`` (Ctrl-C) or
``SIGUSR1`` says in one line where its state is and how to resume, and exits with status 128 + the signal's number
(143, 130, 138: as a shell reports a process that the signal ended), never 0. Anything else (a bug) keeps its
traceback and exit status 1.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

#: Set to 1 (or any non-empty value but 0) to see the traceback of a user error.
DEBUG_ENV = "LIGHTNING_EPISODES_DEBUG"
PROG = "lightning-episodes"
#: The LightningCLI subcommands (Trainer methods) and their one-line help.
TRAINER_COMMANDS = {
    "fit": "train a model on episodes, validating and checkpointing (--test_after_fit true also tests it)",
    "validate": "evaluate a model (--ckpt_path FILE|best|last) on the fixed validation episodes",
    "test": "evaluate a model (--ckpt_path FILE|best|last) on the fixed test episodes; writes test_results.json and "
    "test_episodes.csv",
}
#: The exit status of a run stopped by SIGTERM: 128 + 15, what a shell reports for a process the signal ended.
PREEMPTED_STATUS = 143


class Preempted(Exception):
    """A run stopped by a signal (``SIGTERM``, ``SIGINT``, ``SIGUSR1``) before its end; the message says where its
    state is and how to resume it.

    Args:
        message: that line (empty in the processes of a distributed run that did not write the checkpoint).
        status: the exit status, 128 + the signal's number as a shell reports a process the signal ended (default
            :data:`PREEMPTED_STATUS`, SIGTERM's).
    """

    def __init__(self, message: str = "", status: int = PREEMPTED_STATUS) -> None:
        super().__init__(message)
        self.status = status


#: A tool: ``(module with main(argv) -> int, one-line help)``.
Tool = tuple[str, str]
#: subcommands that are not Trainer methods: name -> (module with ``main(argv) -> int``, one-line help). Imported
#: when they run, like the LightningCLI (:mod:`lightning_episodes.cli`): ``--help``, ``--version`` and a wrong command
#: import nothing beyond the standard library.
TOOLS: dict[str, Tool] = {
    "predict": (
        "lightning_episodes.commands.predict",
        "classify your own images: a checkpoint, a support folder (one sub-folder per class) and query images -> CSV",
    ),
    "difficulty": (
        "lightning_episodes.commands.difficulty",
        "score fixed episodes with a checkpoint: one CSV row per episode (identity, difficulty, accuracy)",
    ),
    "report": (
        "lightning_episodes.commands.report",
        "results tables in the paper's format from test_results.json files",
    ),
    "compare": (
        "lightning_episodes.commands.compare",
        "paired per-episode test-accuracy difference of sampling schemes against a baseline, per scenario",
    ),
    "configs": (
        "lightning_episodes.commands.configs",
        "list the shipped configs (--config takes their names), or copy some into ./configs to edit them",
    ),
}
#: The module of the LightningCLI (``fit``, ``validate``, ``test``), with ``main(args, exit_on_error)``: imported by
#: name when a Trainer command runs, as the tools are (Lightning takes seconds to import). The console is the front
#: door below it: :mod:`lightning_episodes.cli` uses this module's tables and :func:`run`, never the reverse.
TRAINER_CLI = "lightning_episodes.cli"
_PACKAGE = str(Path(__file__).resolve().parent)


def debug() -> bool:
    """Whether ``LIGHTNING_EPISODES_DEBUG`` asks for tracebacks."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def help_text(tools: Mapping[str, Tool]) -> str:
    """The top-level ``--help``: every subcommand with one line."""
    from lightning_episodes import __version__

    width = max(map(len, [*TRAINER_COMMANDS, *tools])) + 2
    lines = [
        f"usage: {PROG} <command> [options]    ({PROG} <command> --help: the options of a command)",
        "",
        f"Episodic few-shot learning with uniform sampling over episode difficulty ({PROG} {__version__}).",
        "",
        "training and evaluation (LightningCLI: --config FILE.yaml and --section.key VALUE options):",
        *(f"  {name:<{width}}{text}" for name, text in TRAINER_COMMANDS.items()),
        "",
        "tools:",
        *(f"  {name:<{width}}{text}" for name, (_, text) in tools.items()),
        "",
        "options:",
        f"  {'-h, --help':<{width}}show this help and exit",
        f"  {'--version':<{width}}print the version and exit",
        "",
        f"A wrong option or value is reported in one line (exit status 2); {DEBUG_ENV}=1 shows the traceback.",
    ]
    return "\n".join(lines) + "\n"


def run(argv: list[str] | None, trainer_cli: Callable[..., object], tools: Mapping[str, Tool]) -> int:
    """Run one command line and return its exit status.

    Args:
        argv: the arguments after the program name (``None``: ``sys.argv[1:]``, which LightningCLI reads itself).
        trainer_cli: builds and runs the LightningCLI: ``trainer_cli(args, exit_on_error=False)``.
        tools: the other subcommands, by name.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        (sys.stdout if args else sys.stderr).write(help_text(tools))
        return 0 if args else 2
    if args[0] == "--version":
        from lightning_episodes import __version__

        print(f"{PROG} {__version__}")
        return 0
    command = args[0] if args[0] in tools or args[0] in TRAINER_COMMANDS else None
    if command is None and not args[0].startswith("-"):
        # answered here, without importing the LightningCLI (options before a command are still its to parse)
        choices = ", ".join([*TRAINER_COMMANDS, *tools])
        sys.stderr.write(
            f"usage: {PROG} <command> [options]\n{PROG}: error: unknown command {args[0]!r} (choose from {choices})\n"
            f"(`{PROG} --help` lists the commands)\n"
        )
        return 2
    try:
        if command is not None and command in tools:
            module = importlib.import_module(tools[command][0])
            return int(module.main(args[1:]) or 0)
        trainer_cli(argv, exit_on_error=False)
        return 0
    except Preempted as stopped:
        if str(stopped):
            sys.stderr.write(f"{PROG} {command}: {stopped}\n")
        return stopped.status
    except Exception as error:
        name = f"{PROG} {command}" if command else PROG
        diverged = _diverged(error)
        if diverged is not None and not debug():
            # the run itself failed (not its arguments): one line, the status of a failed run
            sys.stderr.write(f"{name}: error: {diverged}\n({DEBUG_ENV}=1 shows the traceback)\n")
            return 1
        message = user_error(error)
        if message is None or debug():
            raise
        message = _name_config_file(message, args)
        usage = f"{name} [-h] [--config FILE] [--section.key VALUE ...]" if command in TRAINER_COMMANDS else name
        sys.stderr.write(
            f"usage: {usage}\n{name}: error: {message}\n"
            f"(`{name} --help` lists the options; {DEBUG_ENV}=1 shows the traceback)\n"
        )
        return 2


def _name_config_file(message: str, args: list[str]) -> str:
    """A YAML syntax error as the parser gives it names its input ``"<unicode string>"``: name the ``--config`` file
    that does not parse instead (its line and column are the message's)."""
    if "<unicode string>" not in message:
        return message
    import yaml  # only on this error's path: the console imports nothing beyond the standard library

    configs = [a.split("=", 1)[1] for a in args if a.startswith("--config=")]
    configs += [value for flag, value in zip(args, args[1:], strict=False) if flag == "--config"]
    for config in configs:
        try:
            yaml.safe_load(Path(config).read_text())
        except yaml.YAMLError:
            return message.replace("<unicode string>", config)
        except OSError:
            continue
    return message


def trainer_cli(args: list[str] | None, exit_on_error: bool = True) -> object:
    """:func:`lightning_episodes.cli.main` (:data:`TRAINER_CLI`), imported when a Trainer command runs."""
    return importlib.import_module(TRAINER_CLI).main(args, exit_on_error=exit_on_error)


def entry(argv: list[str] | None = None) -> int:
    """The ``lightning-episodes`` console script: ``fit|validate|test`` or one of :data:`TOOLS`; a user error is one
    line with exit status 2. ``--help``, ``--version`` and a wrong command import nothing beyond the standard library.

    Args:
        argv: the arguments after the program name (``None``: ``sys.argv[1:]``).
    """
    return run(argv, trainer_cli, TOOLS)


def _diverged(error: BaseException) -> str | None:
    """The message of a :class:`~lightning_episodes.algorithms.nonfinite.NonFiniteError` in ``error``'s chain, if
    any."""
    from lightning_episodes.algorithms.nonfinite import NonFiniteError

    return next((_one_line(str(e)) for e in _chain(error) if isinstance(e, NonFiniteError)), None)


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and the exceptions it was raised from, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        # `raise ... from None` hides the context: the new message is meant to replace it
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)


def user_error(error: BaseException) -> str | None:
    """The one-line message of a user error, or ``None`` for anything that deserves a traceback.

    User errors are: an argument the parser rejects; a ``ValueError``, ``TypeError`` or ``OSError`` while the
    configuration is parsed and its classes are built (our checks in ``__init__``, Lightning's of the Trainer
    arguments); at any time, an ``OSError`` about a path of the user's (a data root, an image, a checkpoint, a
    cache or output folder: ``<path>: <the OS's reason>``), a missing file, a Lightning
    ``MisconfigurationException``, or a ``ValueError`` or ``TypeError`` raised by this package (a setup-time
    check such as ``data.shots`` larger than a class).
    """
    from lightning_fabric.utilities.exceptions import MisconfigurationException

    chain = list(_chain(error))
    leaf = chain[-1]
    configuring = any(
        name in ("parse_arguments", "instantiate_classes")
        for frame, _ in traceback.walk_tb(error.__traceback__)
        for name in [frame.f_code.co_name]
    )
    if isinstance(error, argparse.ArgumentError) or any(isinstance(e, argparse.ArgumentError) for e in chain):
        return _argument_message(chain)
    path_error = next((e for e in (error, leaf) if isinstance(e, OSError) and e.filename is not None), None)
    if path_error is not None:
        return _path_message(path_error) if _user_path(path_error) else None
    if isinstance(leaf, MisconfigurationException | FileNotFoundError | IsADirectoryError) or (
        configuring and isinstance(leaf, ValueError | TypeError | OSError)
    ):
        return _one_line(str(leaf) or type(leaf).__name__)
    frames = [frame.f_code.co_filename for frame, _ in traceback.walk_tb(leaf.__traceback__)]
    if isinstance(leaf, ValueError | TypeError) and frames and frames[-1].startswith(_PACKAGE):
        return _one_line(str(leaf))
    return None


def _user_path(error: OSError) -> bool:
    """Whether the operating system refused a path of the user's (not one inside this package, which is a bug)."""
    return not str(Path(os.fsdecode(error.filename)).absolute()).startswith(_PACKAGE)


def _path_message(error: OSError) -> str:
    """``<path>: <the OS's reason>``, or the error's own message when it names the path already."""
    reason = error.strerror or str(error)
    paths = [os.fsdecode(p) for p in (error.filename, error.filename2) if p is not None]
    if all(path in reason for path in paths):
        return _one_line(reason)
    return _one_line(f"{' -> '.join(paths)}: {reason}")


def _argument_message(chain: list[BaseException]) -> str:
    """``--key.path: what is wrong`` from jsonargparse's nested errors (one per level of the config)."""
    keys: list[str] = []
    class_path = None
    for error in chain:
        text = str(error)
        if (match := re.match(r'Parser key "([^"]+)":', text)) and (not keys or keys[-1] != match.group(1)):
            keys.append(match.group(1))
        if match := re.match(r"Problem with given class_path '([^']+)':", text):
            class_path = match.group(1)
    leaf = str(chain[-1]).strip().strip('"')
    if leaf.startswith(("Parser key", "Problem with given class_path", "Does not validate")):
        leaf = leaf.splitlines()[-1].strip()  # the innermost line of a message that was not unfolded
    leaf = re.sub(r"<class '(?:[\w]+\.)*(\w+)'>", r"\1", leaf)
    leaf = re.sub(r"typing\.Literal\[(.*)\]", r"one of \1", leaf)
    leaf = leaf.replace("Expected a ", "expected ").replace(". Got value: ", ", got ")
    # jsonargparse's restricted numbers (PositiveInt): "0 does not conform to restriction v>0"
    leaf = re.sub(r"^(.*) does not conform to restriction v(>=?)(\S+)$", r"expected a value \2 \3, got \1", leaf)
    if "is not accepted" in leaf and class_path:
        leaf = f"{leaf} by {class_path}"
    if near := _suggested(chain):  # a class's options are named under their section: --shots is --data.shots
        leaf += _did_you_mean([f"--{'.'.join(keys)}.{name[2:]}" if keys else name for name in near])
    return _one_line(f"--{'.'.join(keys)}: {leaf}" if keys else leaf)


#: jsonargparse's messages for an option that a parser does not have: given on the command line, as a key of a
#: class's ``init_args`` (``--data.shot 3``), or as a key of a config file (``trainer: {max_step: 10}``).
_UNRECOGNIZED = re.compile(r"unrecognized arguments: (?P<args>.+)", re.DOTALL)
_NOT_ACCEPTED = re.compile(r"Option '(?P<key>[^']+)' is not accepted")
_NOT_IN_SUBCOMMAND = re.compile(r"Subcommand '[^']+' does not accept option '(?P<key>[^']+)'")


def nearest_names(name: str, names: Iterable[str]) -> list[str]:
    """The few of ``names`` closest to ``name`` (a mistyped option), closest first; ``[]`` when none is close.

    Only the names about as close as the closest are kept: options of one section share their prefix
    (``--trainer.``), so that every name of the section is "close" to a typo in any of them.
    """
    names = list(dict.fromkeys(names))
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.75)
    ratio = {other: difflib.SequenceMatcher(None, name, other).ratio() for other in close}
    return [other for other in close if ratio[other] >= ratio[close[0]] - 0.05] if close else []


def _did_you_mean(names: list[str]) -> str:
    return f"; did you mean {' or '.join(names)}?" if names else ""


def suggest_options(message: str, options: Iterable[str]) -> str:
    """A parser's error about options it does not have, naming the nearest of its ``options``; other messages as
    they are.

    ``unrecognized arguments: --trainer.max_step 10`` becomes ``unknown option --trainer.max_step; did you mean
    --trainer.max_steps?`` (values and other words left over are dropped: they belong to the unknown options), and
    ``Option 'shot' is not accepted`` (a class's parser, whose ``options`` are ``--shots`` and the like) gains
    ``; did you mean --shots?``, which :func:`user_error` prefixes with the option's section (``--data.shots``);
    a config file's ``Subcommand 'fit' does not accept option 'trainer.max_step'`` gains ``; did you mean
    trainer.max_steps?`` (given the subcommand's options).

    Args:
        message: the parser's message.
        options: the parser's option strings (``--trainer.max_steps``, ...).
    """
    options = [option for option in options if option.startswith("--")]
    if match := _NOT_ACCEPTED.fullmatch(message):
        return message + _did_you_mean(nearest_names(f"--{match['key']}", options))
    if match := _NOT_IN_SUBCOMMAND.fullmatch(message):  # a config file's key: named as in the file
        return message + _did_you_mean([name[2:] for name in nearest_names(f"--{match['key']}", options)])
    if not (match := _UNRECOGNIZED.fullmatch(message)):
        return message
    unknown = [arg.split("=", 1)[0] for arg in match["args"].split() if re.match(r"--?[A-Za-z_]", arg)]
    if not unknown:
        return message  # words without an option: argparse's message says it best
    if len(unknown) == 1:
        return f"unknown option {unknown[0]}{_did_you_mean(nearest_names(unknown[0], options))}"
    near = {arg: nearest_names(arg, options) for arg in unknown}
    return "unknown options " + ", ".join(
        f"{arg} (did you mean {' or '.join(near[arg])}?)" if near[arg] else arg for arg in near
    )


def _suggested(chain: list[BaseException]) -> list[str]:
    """The names that a parser suggested (:func:`suggest_options`) in the error it raised from the leaf of ``chain``,
    whose own message lacks them."""
    ask = f"{str(chain[-1]).strip().strip(chr(34))}; did you mean "
    message = next((str(e) for e in reversed(chain[:-1]) if str(e).startswith(ask)), "")
    return message[len(ask) :].removesuffix("?").split(" or ") if message else []


def _one_line(message: str) -> str:
    return " ".join(line.strip() for line in message.strip().splitlines() if line.strip())
