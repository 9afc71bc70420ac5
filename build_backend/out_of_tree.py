"""The package's build backend: setuptools' own, run with its build folders in a temporary folder, so that
``pip wheel .``, ``pip install .`` and ``python -m build`` leave the checkout as they found it.

setuptools writes its build folder (``build/``) and the package's metadata (``lightning_episodes.egg-info/``) beside
setup.cfg, and no setting of its own puts them elsewhere but at a fixed path; a stale ``build/lib`` also ships a
module deleted since into the next wheel. Each hook here is setuptools' own, run with its ``build_base`` and
``egg_base`` in a temporary folder (through the extra configuration file that setuptools reads from
``DIST_EXTRA_CONFIG``), which is removed afterwards.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from setuptools import build_meta


@contextlib.contextmanager
def _out_of_tree() -> Iterator[None]:
    """setuptools' build folder and metadata in a temporary folder while the block runs."""
    previous = os.environ.get("DIST_EXTRA_CONFIG")
    with tempfile.TemporaryDirectory(prefix="lightning-episodes-build-") as folder:
        config = os.path.join(folder, "out-of-tree.cfg")
        escaped = folder.replace("%", "%%")  # setuptools reads the file with configparser's interpolation
        with open(config, "w", encoding="utf-8") as file:
            file.write(f"[build]\nbuild_base = {os.path.join(escaped, 'build')}\n[egg_info]\negg_base = {escaped}\n")
        os.environ["DIST_EXTRA_CONFIG"] = config
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop("DIST_EXTRA_CONFIG", None)
            else:
                os.environ["DIST_EXTRA_CONFIG"] = previous


def _out_of_tree_hook(hook: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(hook)
    def run(*args: Any, **kwargs: Any) -> Any:
        with _out_of_tree():
            return hook(*args, **kwargs)

    return run


# the PEP 517 and PEP 660 hooks (each of them runs setuptools: even the `get_requires_*` ones write the egg-info)
build_wheel = _out_of_tree_hook(build_meta.build_wheel)
build_sdist = _out_of_tree_hook(build_meta.build_sdist)
build_editable = _out_of_tree_hook(build_meta.build_editable)
get_requires_for_build_wheel = _out_of_tree_hook(build_meta.get_requires_for_build_wheel)
get_requires_for_build_sdist = _out_of_tree_hook(build_meta.get_requires_for_build_sdist)
get_requires_for_build_editable = _out_of_tree_hook(build_meta.get_requires_for_build_editable)
prepare_metadata_for_build_wheel = _out_of_tree_hook(build_meta.prepare_metadata_for_build_wheel)
prepare_metadata_for_build_editable = _out_of_tree_hook(build_meta.prepare_metadata_for_build_editable)
