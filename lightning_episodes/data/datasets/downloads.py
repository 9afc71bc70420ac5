"""What a dataset download needs: learn2learn, and only for the download.

The paper's datasets are read from the files on disk by this library itself; learn2learn 0.2.0 is used only to
fetch missing files (``data.download=true``: its addresses, its Google Drive and Zenodo fallbacks). Its published
source does not build on Python 3.11 as it stands (its generated C files predate 3.11), so it is not a dependency of
the package: ``make learn2learn`` (``scripts/install_learn2learn.sh``) builds it from its source for the Python in
use. Without it, a download stops at set-up with one line that says so; reading files already on disk never needs it.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

__all__ = ["INSTALL_LEARN2LEARN", "learn2learn_installed", "learn2learn_module", "learn2learn_note"]

#: How to install learn2learn, as the messages say it.
INSTALL_LEARN2LEARN = (
    "`make learn2learn` in a checkout of lightning-episodes (scripts/install_learn2learn.sh [PYTHON]: it builds "
    "learn2learn 0.2.0 from its source for that Python)"
)


def learn2learn_installed() -> bool:
    """Whether learn2learn can be imported (looked up, not imported: that takes seconds)."""
    try:
        return importlib.util.find_spec("learn2learn") is not None
    except (ImportError, ValueError):  # a broken entry in sys.modules
        return False


def learn2learn_note() -> str:
    """What a message offering the download adds: through learn2learn, and how to install it when it is not."""
    if learn2learn_installed():
        return " through learn2learn"
    return f" through learn2learn, which is not installed: install it with {INSTALL_LEARN2LEARN}"


def learn2learn_module(name: str, dataset: str) -> ModuleType:
    """Import ``name`` (a module of learn2learn) to download ``dataset``.

    Raises:
        ValueError: in one line naming ``data.download``, the dataset and how to install learn2learn, if it is not
            installed (or does not import).
    """
    try:
        return importlib.import_module(name)
    except ImportError as error:
        absent = isinstance(error, ModuleNotFoundError) and (error.name or "").partition(".")[0] == "learn2learn"
        reason = "is not installed" if absent else f"does not import ({error})"
        raise ValueError(
            f"data.download=true: downloading {dataset} needs learn2learn, which {reason}; install it with "
            f"{INSTALL_LEARN2LEARN}, or put the files in place yourself and leave data.download false"
        ) from None
