"""MkDocs hook: the CLI reference, ``lightning-episodes --help`` and each command's ``--help``, run at build time.

They fill the placeholder of ``docs/reference/cli.md`` (whose introduction is written there), wrapped to the page's
width.

The commands are read from the top-level help (its indented ``name  text`` lines), so a new command appears on the
next build. All the helps are printed by one Python process (the package is imported once), with the console
script's name and a fixed width, so the page is the same on every machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

PAGE = "reference/cli.md"
WIDTH = "100"
#: the placeholder of docs/reference/cli.md that the helps replace
GENERATED = re.compile(r"<!-- generated: .*?-->.*?<!-- end generated -->", re.DOTALL)
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


def fit_width(text: str, width: int = int(WIDTH)) -> str:
    """``text`` with each line longer than ``width`` wrapped at its spaces (argparse leaves a long option, a long
    description and Lightning's own help lines unwrapped). A continuation starts under the line's second column (the
    text after its first run of two or more spaces, as argparse aligns a command's or option's help), else under the
    line's own indent (four columns further in for an option or a usage item)."""
    lines = []
    for line in text.rstrip().splitlines():
        line = line.rstrip()
        if len(line) <= width:
            lines.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        column = re.search(r"\S {2,}(?=\S)", line)
        if column and column.end() < width // 2:
            hanging = " " * column.end()
        else:  # an option's or a usage item's continuation a little further in, a paragraph's under itself
            hanging = indent + ("    " if line.lstrip().startswith(("-", "[")) else "")
        lines += textwrap.wrap(
            line.strip(),
            width,
            initial_indent=indent,
            subsequent_indent=hanging,
            break_long_words=False,
            break_on_hyphens=False,
        )
    return "\n".join(lines)


def _fence(text: str) -> str:
    return "```text\n" + fit_width(text) + "\n```\n"


def helps_text(helps: dict[str, str]) -> str:
    """The generated part of the reference page: the top-level help, then a section per command."""
    lines = ["## `lightning-episodes`", "", _fence(helps[""])]
    for command, text in helps.items():
        if command:
            lines += [f"## `lightning-episodes {command}`", "", _fence(text)]
    # the class lets docs/stylesheets/extra.css wrap the helps' lines on a page narrower than WIDTH columns
    return '<div class="cli-help" markdown="block">\n\n' + "\n".join(lines) + "\n</div>\n"


def fill(markdown: str, generated: str) -> str:
    """``markdown`` with the placeholder between its ``<!-- generated: ... -->`` and ``<!-- end generated -->``
    replaced by ``generated`` (the placeholder is what the repository's file view shows)."""
    filled, count = GENERATED.subn(lambda _: generated, markdown)
    if count != 1:
        raise ValueError(f"{PAGE} needs one <!-- generated: ... --> ... <!-- end generated --> placeholder")
    return filled


def on_config(config: MkDocsConfig, **kwargs: Any) -> MkDocsConfig:
    """Start printing the helps."""
    global _child
    _child = start_helps(Path(config.config_file_path).parent)
    return config


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files, **kwargs: Any) -> str:
    """The CLI reference page (docs/reference/cli.md) with the helps, once the child process has printed them."""
    global _child
    if page.file.src_uri != PAGE:
        return markdown
    if _child is None:  # `mkdocs serve` rebuilds without a new on_config for some changes
        _child = start_helps(Path(config.config_file_path).parent)
    child, _child = _child, None
    return fill(markdown, helps_text(collect_helps(child)))


def on_shutdown(**kwargs: Any) -> None:
    """Stop a child process that no page waited for (a build that failed early)."""
    if _child is not None and _child.poll() is None:
        _child.kill()
        _child.wait()
