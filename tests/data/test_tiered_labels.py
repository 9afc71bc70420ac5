"""The tiered-ImageNet labels pickle is read with a restricted unpickler: the labels load (numpy arrays, strings, a
Python 2 pickle too), a pickle that would run code is refused before it runs."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from lightning_episodes.data.datasets.tiered_imagenet import read_labels


class _Payload:
    """Unpickling it calls ``os.system`` (what a crafted labels file would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


LABELS = {
    "label_specific": np.arange(6, dtype=np.int32) % 3,
    "label_general": np.zeros(6, dtype=np.int32),
    "label_specific_str": ["n01", "n02", "n03"],
    "label_general_str": [b"animal"],
}


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_labels_load(tmp_path: Path, protocol: int) -> None:
    path = tmp_path / "train_labels.pkl"
    path.write_bytes(pickle.dumps(LABELS, protocol=protocol))
    labels = read_labels(path)
    assert labels.keys() == LABELS.keys()
    assert np.array_equal(labels["label_specific"], LABELS["label_specific"])
    assert labels["label_specific"].dtype == np.int32
    assert labels["label_general_str"] == [b"animal"]


def test_a_pickle_that_runs_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "train_labels.pkl"
    path.write_bytes(pickle.dumps({**LABELS, "label_specific": _Payload(marker)}))
    with pytest.raises(ValueError, match=rf"{path} is not a tiered-ImageNet labels file: posix.system is not allowed"):
        read_labels(path)
    assert not marker.exists()
    path.write_bytes(pickle.dumps(_Payload))  # a class of this test module: not allowed either
    with pytest.raises(ValueError, match="_Payload is not allowed"):
        read_labels(path)
