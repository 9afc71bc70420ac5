"""MkDocs hook: the CLI reference, ``lightning-episodes --help`` and each command's ``--help``, run at build time.

The commands are read from the top-level help (its indented ``name  text`` lines), so a new command appears on the
next build. All the helps are printed by one Python process (the package is imported once), with the console
script's name and a fixed width, so the page is the same on every machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

PAGE = "reference/cli.md"
WIDTH = "100"
SEPARATOR = "\n=====8<===== lightning-episodes help =====8<=====\n"

# Runs in a child process: prints the top-level help, then each command's, separated by SEPARATOR.
_PRINT_HELPS = f"""
import contextlib, io, re, sys
sys.argv[0] = "lightning-episodes"
from lightning_episodes.cli import entry

def help_of(args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            entry(args)
        except SystemExit:
            pass
    return out.getvalue()

top = help_of(["--help"])
commands = re.findall(r"^  ([a-z][a-z_-]*)  ", top, re.M)
print(top, end="")
for command in commands:
    print({SEPARATOR!r} + command + "\\n" + help_of([command, "--help"]), end="")
"""


_child: subprocess.Popen[str] | None = None


def start_helps(root: Path) -> subprocess.Popen[str]:
    """Start the child process that prints every help (it runs while the other pages are built)."""
    env = {**os.environ, "COLUMNS": WIDTH, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    env.pop("LIGHTNING_EPISODES_DEBUG", None)
    return subprocess.Popen(
        [sys.executable, "-c", _PRINT_HELPS],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def collect_helps(child: subprocess.Popen[str]) -> dict[str, str]:
    """``{"": top-level help, command: its help}`` from the child process."""
    stdout, stderr = child.communicate(timeout=600)
    if child.returncode != 0:
        raise RuntimeError(f"printing the CLI's help failed:\n{stderr[-3000:]}")
    top, *sections = stdout.split(SEPARATOR)
    helps = {"": top}
    for section in sections:
        command, _, text = section.partition("\n")
        helps[command] = text
    return helps


def _fence(text: str) -> str:
    return "```text\n" + text.rstrip() + "\n```\n"


def page_text(helps: dict[str, str]) -> str:
    """The reference page: the top-level help, then a section per command."""
    lines = [
        "# CLI reference",
        "",
        "The `--help` of the `lightning-episodes` console script and of each of its commands, printed when this site",
        "was built (`python -m lightning_episodes` is the same program). `fit`, `validate` and `test` are",
        "LightningCLI commands: every option can also be given in a `--config FILE.yaml`, and",
        "`--model.help CLASS` / `--data.help CLASS` list the arguments of a class. See",
        "[Getting started](../getting-started.md) for examples.",
        "",
        "## `lightning-episodes`",
        "",
        _fence(helps[""]),
    ]
    for command, text in helps.items():
        if command:
            lines += [f"## `lightning-episodes {command}`", "", _fence(re.sub(r"[ \t]+\n", "\n", text))]
    return "\n".join(lines)


def on_config(config: MkDocsConfig, **kwargs: Any) -> MkDocsConfig:
    """Start printing the helps."""
    global _child
    _child = start_helps(Path(config.config_file_path).parent)
    return config


def on_files(files: Files, config: MkDocsConfig, **kwargs: Any) -> Files:
    """Add the CLI reference page; its text is filled in when the page is built."""
    files.append(File.generated(config, PAGE, content="# CLI reference\n"))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files, **kwargs: Any) -> str:
    """The CLI reference page's text, once the child process has printed the helps."""
    global _child
    if page.file.src_uri != PAGE:
        return markdown
    if _child is None:  # `mkdocs serve` rebuilds without a new on_config for some changes
        _child = start_helps(Path(config.config_file_path).parent)
    child, _child = _child, None
    return page_text(collect_helps(child))


def on_shutdown(**kwargs: Any) -> None:
    """Stop a child process that no page waited for (a build that failed early)."""
    if _child is not None and _child.poll() is None:
        _child.kill()
        _child.wait()
