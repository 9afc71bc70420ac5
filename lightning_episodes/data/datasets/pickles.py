"""Reading the pickles that some datasets ship (Mini-ImageNet's images, tiered-ImageNet's images and labels,
FGVC-Aircraft's ``labels.pkl``) without letting a crafted file run code.

:func:`read_pickle` reconstructs only what such files hold: builtin containers, strings and numbers, and numpy
arrays. Anything else (a class that runs code on load, ``os.system``) stops the read with a ``ValueError``.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

__all__ = ["read_pickle"]

#: What a dataset pickle may reconstruct besides the containers, strings and numbers pickle encodes itself: builtin
#: containers and strings, and numpy arrays and scalars (nothing that runs code or touches files).
ALLOWED_GLOBALS = frozenset(
    {("builtins", name) for name in ("dict", "list", "tuple", "set", "frozenset", "str", "bytes", "bytearray")}
    | {
        (module, name)
        for core in ("numpy.core", "numpy._core")
        for module, name in (
            (f"{core}.multiarray", "_reconstruct"),
            (f"{core}.multiarray", "scalar"),
            (f"{core}.numeric", "_frombuffer"),
        )
    }
    | {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}
)  # encode: bytes in protocol-2 pickles


class _DataUnpickler(pickle.Unpickler):
    """An unpickler that reconstructs only :data:`ALLOWED_GLOBALS`."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a data file")
        return super().find_class(module, name)


def read_pickle(path: Path, what: str) -> Any:
    """The content of a dataset pickle, read with an unpickler that allows only builtin containers, strings, numbers
    and numpy arrays (Python 2 pickles of numpy arrays included).

    Args:
        path: the file.
        what: what the file should be, for the error message (``"a tiered-ImageNet labels file"``).

    Raises:
        ValueError: naming the file and ``what``, if it holds anything else or is not a pickle.
    """
    with open(path, "rb") as file:
        try:
            return _DataUnpickler(file, encoding="latin1").load()  # Python 2 pickles of numpy arrays need latin1
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as error:
            raise ValueError(f"{path} is not {what}: {error}") from None
