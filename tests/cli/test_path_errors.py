"""A path the operating system refuses (a symbolic link loop, a dangling link, a file where a folder belongs) is one
line naming the path and the OS's reason, exit status 2, wherever the run meets it; a bug keeps its traceback."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lightning_episodes.cli import entry
from lightning_episodes.console import user_error
from tests.cli.test_checkpoints import _config


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr().err
    assert "Traceback" not in captured
    (line,) = [line for line in captured.splitlines() if ": error: " in line]
    return line


def _image_folder(root: Path) -> Path:
    """``root/{train,val,test}/c<k>/<i>.png``: 5 classes of 5 tiny images per split."""
    rng = np.random.default_rng(0)
    for split in ("train", "val", "test"):
        for c in range(5):
            folder = root / split / f"c{c}"
            folder.mkdir(parents=True)
            for i in range(5):
                Image.fromarray(rng.integers(0, 255, (8, 8), dtype=np.uint8)).save(folder / f"{i}.png")
    return root


def _loop(path: Path) -> Path:
    """A symbolic link to itself (opening it: "Too many levels of symbolic links")."""
    path.symlink_to(path.name)
    return path


def _dangling(path: Path) -> Path:
    path.symlink_to(path.parent / "gone.png")
    return path


#: a broken folder dataset: what to break, and the path and reason the line must name
FOLDER_BREAKAGES: dict[str, Callable[[Path], tuple[Path, str]]] = {
    "image-loop": lambda root: (_loop(root / "train" / "c0" / "9.png"), "Too many levels of symbolic links"),
    "dangling-image": lambda root: (_dangling(root / "val" / "c1" / "9.png"), "No such file or directory"),
    "class-folder-loop": lambda root: (_loop(root / "test" / "c9"), "Too many levels of symbolic links"),
}


@pytest.mark.parametrize("breakage", list(FOLDER_BREAKAGES))
def test_a_folder_dataset_path_the_os_refuses_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], breakage: str
) -> None:
    root = _image_folder(tmp_path / "images")
    path, reason = FOLDER_BREAKAGES[breakage](root)
    config = str(_config(tmp_path / "run"))
    assert entry(["fit", "--config", config, "--data.dataset=folder", f"--data.root={root}"]) == 2
    assert _error_line(capsys).endswith(f"error: {path}: {reason}")


def test_a_data_root_that_is_a_link_loop_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _loop(tmp_path / "images")
    config = str(_config(tmp_path / "run"))
    assert entry(["fit", "--config", config, "--data.dataset=folder", f"--data.root={root}"]) == 2
    assert f"data.root='{root}' is not a folder" in _error_line(capsys)


@pytest.mark.parametrize(("kind", "reason"), [("loop", "Too many levels of symbolic links"), ("dangling", "gone.png")])
def test_a_checkpoint_path_the_os_refuses_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, reason: str
) -> None:
    path = _loop(tmp_path / "x.ckpt") if kind == "loop" else _dangling(tmp_path / "x.ckpt")
    assert entry(["test", "--config", str(_config(tmp_path / "run")), f"--ckpt_path={path}"]) == 2
    line = _error_line(capsys)
    assert str(path) in line
    assert reason in line


def test_only_user_paths_are_one_line() -> None:
    def raised(error: BaseException) -> BaseException:
        try:
            raise error
        except BaseException as caught:  # noqa: BLE001  (the traceback is what the console reads)
            return caught

    loop = OSError(errno.ELOOP, os.strerror(errno.ELOOP), "/data/x.png")
    assert user_error(raised(loop)) == "/data/x.png: Too many levels of symbolic links"
    moved = OSError(errno.EXDEV, os.strerror(errno.EXDEV), "/a", None, "/b")
    assert user_error(raised(moved)) == "/a -> /b: Invalid cross-device link"
    # no path, or a path inside the package (a broken installation or a bug): the traceback stays
    assert user_error(raised(OSError(errno.EIO, "Input/output error"))) is None
    package = Path(__file__).resolve().parents[2] / "lightning_episodes" / "missing.json"
    assert user_error(raised(OSError(errno.ENOENT, "No such file or directory", str(package)))) is None
