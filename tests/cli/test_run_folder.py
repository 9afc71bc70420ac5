"""One run per checkpoint folder, output folders checked before training, checkpoints written atomically: through the
real console entry point in process (exit status and the one error line), and the lock file on its own."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from pytorch_lightning.plugins.io import TorchCheckpointIO

from lightning_episodes.cli import entry
from lightning_episodes.run_folder import (
    LOCK_NAME,
    RunFolderLock,
    RunFolderLockedError,
    atomic_write,
    owned_folders,
    probe_writable,
    remove_stale_temporaries,
)
from tests.cli.test_checkpoints import _config


def _error_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if ": error: " in line]


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _with_dirpath(folder: Path, dirpath: Path, **trainer: Any) -> Path:
    """tests/cli/test_checkpoints.py's config with the checkpoint folder ``dirpath`` (and trainer options)."""
    path = _config(folder)
    config = yaml.safe_load(path.read_text())
    config["trainer"]["callbacks"][0]["init_args"]["dirpath"] = str(dirpath)
    config["trainer"].update(trainer)
    path.write_text(yaml.safe_dump(config))
    return path


# -- the lock file ---------------------------------------------------------------------------------------------
def test_the_lock_records_the_process_and_is_released(tmp_path: Path) -> None:
    with RunFolderLock(tmp_path, owner="command: fit") as lock:
        record = json.loads((tmp_path / LOCK_NAME).read_text())
        assert record == {"pid": os.getpid(), "host": socket.gethostname(), "owner": "command: fit"}
        with pytest.raises(RunFolderLockedError, match=rf"{tmp_path} is in use by another run \(process {os.getpid()}"):
            RunFolderLock(tmp_path).acquire()
        assert lock.path.exists()  # the refused one did not remove it
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_dead_process_lock_is_taken_over_with_a_warning(tmp_path: Path) -> None:
    dead = _dead_pid()
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": dead, "host": socket.gethostname(), "owner": ""}))
    with pytest.warns(UserWarning, match=f"process {dead} .* is no longer running"), RunFolderLock(tmp_path):
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    # another host's process cannot be checked: its lock holds
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": dead, "host": "elsewhere", "owner": ""}))
    with pytest.raises(RunFolderLockedError, match=f"process {dead} on elsewhere"):
        RunFolderLock(tmp_path).acquire()


def test_a_requeued_cluster_job_takes_over_its_own_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SLURM requeues a job on another node: its earlier run's lock (another host, same job id) is its own."""
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 1, "host": "node-a", "owner": "", "job": "4242"}))
    with pytest.warns(UserWarning, match="no longer running"), RunFolderLock(tmp_path):
        assert json.loads((tmp_path / LOCK_NAME).read_text())["job"] == "4242"
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 1, "host": "node-a", "owner": "", "job": "4243"}))
    with pytest.raises(RunFolderLockedError, match="process 1 on node-a"):
        RunFolderLock(tmp_path).acquire()


# -- through the command line -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_second_fit_into_a_used_folder_stops_at_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A live run (here: this test's parent process) holds the folder: the fit stops before any step, one line
    naming the folder and the other run; once that run is gone, a fit takes the folder over and releases it."""
    folder = tmp_path / "shared"
    folder.mkdir()
    other = {"pid": os.getppid(), "host": socket.gethostname(), "owner": "command: lightning-episodes fit ..."}
    (folder / LOCK_NAME).write_text(json.dumps(other))
    config = _with_dirpath(tmp_path / "b", folder, max_steps=2)
    assert entry(["fit", "--config", str(config)]) == 2
    (line,) = _error_lines(capsys)
    assert f"checkpoint folder {folder} is in use by another run (process {os.getppid()} on " in line
    assert sorted(p.name for p in folder.iterdir()) == [LOCK_NAME]  # nothing trained, nothing written
    assert not (tmp_path / "b" / "logs").exists()  # the logger folder made by the check is removed again

    (folder / LOCK_NAME).write_text(json.dumps({**other, "pid": _dead_pid()}))
    with pytest.warns(UserWarning, match="no longer running"):
        assert entry(["fit", "--config", str(config)]) == 0
    assert (folder / "last.ckpt").is_file()
    assert not (folder / LOCK_NAME).exists()  # released at the end


@pytest.mark.parametrize("which", ["checkpoint", "logger"])
def test_an_output_folder_that_cannot_be_written_stops_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    inside = blocker / "run"
    if which == "checkpoint":
        config = _with_dirpath(tmp_path, inside)
    else:
        config = _config(tmp_path)
        data = yaml.safe_load(config.read_text())
        data["trainer"]["logger"]["init_args"]["save_dir"] = str(inside)
        config.write_text(yaml.safe_dump(data))
    assert entry(["fit", "--config", str(config)]) == 2
    (line,) = _error_lines(capsys)
    assert f"{which} folder {inside}" in line
    assert line.endswith(f"cannot be written: {blocker} is a file, not a folder")
    assert not list(tmp_path.rglob("*.ckpt"))


def test_the_probe_names_proc(tmp_path: Path) -> None:
    with pytest.raises(OSError, match=r"logger folder /proc/lightning-episodes-test/x cannot be written: "):
        probe_writable("/proc/lightning-episodes-test/x", "logger folder")
    assert probe_writable(tmp_path / "a" / "b", "logger folder") == [tmp_path / "a" / "b", tmp_path / "a"]
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == []  # the probe file is gone


# -- atomic checkpoint writes -----------------------------------------------------------------------------------
class FaultyCheckpointIO(TorchCheckpointIO):
    """Writes checkpoints as ``torch.save`` does, except the ``fail_at``-th ``last.ckpt``: half of its bytes, then
    ``ENOSPC`` (a full disk) or :class:`Killed` (the process killed mid-write)."""

    def __init__(self, fail_at: int = 2, fault: str = "enospc") -> None:
        super().__init__()
        self.fail_at, self.fault, self.lasts = fail_at, fault, 0

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        if "last.ckpt" not in Path(path).name:
            return super().save_checkpoint(checkpoint, path, storage_options)
        self.lasts += 1
        if self.lasts < self.fail_at:
            return super().save_checkpoint(checkpoint, path, storage_options)
        import io

        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        with open(path, "wb") as handle:
            handle.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
        if self.fault == "enospc":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        raise Killed


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs in the writer."""


@pytest.mark.parametrize("fault", ["enospc", "kill"])
def test_a_failed_checkpoint_write_keeps_the_previous_last_ckpt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fault: str
) -> None:
    """last.ckpt every 2 steps; the second write fails half-way: last.ckpt is still the step-2 state; a full disk
    is one line naming the file and saying how to resume from it; `fit --ckpt_path last` resumes from step 2 and
    finishes."""
    folder = tmp_path / "checkpoints"
    config = _with_dirpath(tmp_path, folder, max_steps=6, val_check_interval=6)
    faulty = f"--trainer.plugins={json.dumps({'class_path': f'{__name__}.FaultyCheckpointIO'})}"
    args = ["fit", "--config", str(config), faulty, f"--trainer.plugins.init_args.fault={fault}"]
    if fault == "kill":
        with pytest.raises(Killed):
            entry(args)
    else:
        assert entry(args) == 2
        (line,) = _error_lines(capsys)
        last = folder / "last.ckpt"
        assert line.endswith(
            f"could not write {last}: No space left on device (the previous file is kept); {last} holds step 2; "
            "free some space, then resume with the same command and --ckpt_path last"
        )
    assert torch.load(folder / "last.ckpt", weights_only=True)["global_step"] == 2
    assert sorted(p.name for p in folder.iterdir() if p.name != LOCK_NAME) == ["last.ckpt"]  # no temporary left
    assert entry(["fit", "--config", str(config), "--ckpt_path", "last"]) == 0
    assert torch.load(folder / "last.ckpt", weights_only=True)["global_step"] == 6
    assert not (folder / LOCK_NAME).exists()


def test_a_full_disk_at_the_first_checkpoint_says_to_run_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "checkpoints"
    config = _with_dirpath(tmp_path, folder, max_steps=6, val_check_interval=6)
    faulty = f"--trainer.plugins={json.dumps({'class_path': f'{__name__}.FaultyCheckpointIO'})}"
    assert entry(["fit", "--config", str(config), faulty, "--trainer.plugins.init_args.fail_at=1"]) == 2
    (line,) = _error_lines(capsys)
    assert line.endswith(
        f"could not write {folder / 'last.ckpt'}: No space left on device; no checkpoint was written yet (free some "
        "space, then run the same command again)"
    )
    assert not (folder / LOCK_NAME).exists()


def test_a_fit_removes_the_temporary_files_of_killed_checkpoint_writes(tmp_path: Path) -> None:
    """Only ``.<name>.tmp-<pid>`` files of a process that is gone, in the folder the run takes: a live process's
    write in progress and anything else stay."""
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    dead = folder / f".last.ckpt.tmp-{_dead_pid()}"
    live = folder / f".last.ckpt.tmp-{os.getpid()}"
    others = [folder / ".notes.tmp-x", folder / "last.ckpt.tmp-1", folder / "best-2-0.5000.ckpt"]
    for path in [dead, live, *others]:
        path.write_bytes(b"partial")
    with owned_folders(folder, [], "test"):
        assert not dead.exists()
        assert live.exists()
        assert all(path.exists() for path in others)
    assert remove_stale_temporaries(folder) == []


def test_atomic_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "x.bin"
    target.write_bytes(b"old")

    def fail(temporary: Path) -> None:
        temporary.write_bytes(b"ne")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError, match=f"could not write {target}: No space left on device") as caught:
        atomic_write(target, fail)
    assert caught.value.filename == str(target)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.bin"]
    atomic_write(target, lambda temporary: temporary.write_bytes(b"new"))
    assert target.read_bytes() == b"new"


def test_best_is_only_read_from_the_runs_own_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A last.ckpt whose record points into another folder (another run's) is refused, not followed."""
    folder, elsewhere = tmp_path / "mine", tmp_path / "theirs"
    folder.mkdir()
    elsewhere.mkdir()
    torch.save({"state_dict": {}}, elsewhere / "best-6-0.9000.ckpt")
    record = {"best_model_path": str(elsewhere / "best-6-0.9000.ckpt")}
    made_by = {"_class_path": "lightning_episodes.algorithms.ProtoNet"}  # a run of this config's algorithm
    checkpoint = {"state_dict": {}, "callbacks": {"ResumableCheckpoint": record}, "hyper_parameters": made_by}
    torch.save(checkpoint, folder / "last.ckpt")
    assert entry(["test", "--config", str(_with_dirpath(tmp_path, folder)), "--ckpt_path", "best"]) == 2
    (line,) = _error_lines(capsys)
    assert line.endswith(
        f"records the best checkpoint {elsewhere / 'best-6-0.9000.ckpt'}, outside its own folder {folder}"
    )
