"""Output folders a run owns: checked for writing before any step, locked against a second run, written atomically.

- :func:`probe_writable` creates a folder (and its parents) and writes and deletes a probe file in it, so that a
  folder that cannot be written (under a regular file, on a read-only file system) is one error naming it before
  training, not a traceback at the first checkpoint.
- :class:`RunFolderLock` is an exclusive lock file (``.lightning-episodes.lock``: the process id and host of the run
  that holds it) in a checkpoint folder. A second run into the same folder stops at its start, naming the folder and
  the run that holds it; the lock of a process that died without releasing it (killed) is taken over with a warning.
- :func:`atomic_write` writes a file as a temporary file in the same folder, flushed to disk (``fsync``) and renamed
  over the target, so the target is always either the previous file or the new one, never a partial write.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: The lock file's name in a checkpoint folder.
LOCK_NAME = ".lightning-episodes.lock"
#: A SLURM job requeued (maybe on another host) takes over the lock of its earlier run.
_JOB_ENV = "SLURM_JOB_ID"


class OutputPathError(OSError):
    """An output path that cannot be used; its message names the path and the reason (the console prints it)."""

    def __init__(self, message: str, path: str | Path) -> None:
        super().__init__(errno.EIO, message, str(path))

    def __str__(self) -> str:
        return str(self.strerror)


class RunFolderLockedError(OutputPathError):
    """A checkpoint folder that another running process holds."""


def probe_writable(folder: str | Path, what: str) -> list[Path]:
    """Create ``folder`` (and missing parents) and write, flush and delete a probe file in it.

    Args:
        folder: the folder a run will write into.
        what: what it is, for the message (``"checkpoint folder"``, ``"logger folder"``).

    Returns:
        The folders this call created, deepest first (:func:`remove_empty` removes them again if the run fails
        before writing anything).

    Raises:
        OutputPathError: naming ``folder`` and the operating system's reason, if it cannot be created or written.
    """
    folder = Path(folder)
    created = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]
    existing = next((p for p in (folder, *folder.parents) if os.path.lexists(p)), None)
    if existing is not None and os.path.exists(existing) and not existing.is_dir():
        raise OutputPathError(f"{what} {folder} cannot be written: {existing} is a file, not a folder", folder)
    probe = folder / f".write-probe-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with probe.open("wb") as handle:
            handle.write(b"probe")
            handle.flush()
            os.fsync(handle.fileno())
        probe.unlink()
    except OSError as error:
        reason = error.strerror or str(error)
        where = f" ({error.filename})" if error.filename and Path(error.filename) != folder else ""
        raise OutputPathError(f"{what} {folder} cannot be written: {reason}{where}", folder) from None
    return created


def remove_empty(folders: list[Path]) -> None:
    """Remove the ``folders`` (deepest first) that are still empty; keep any that holds something."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


class RunFolderLock:
    """An exclusive lock on a checkpoint folder for one run (see the module docstring).

    Args:
        folder: the checkpoint folder (it must exist).
        owner: what the lock file records about the run besides its process and host (e.g. the command).

    Example::

        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder, RunFolderLock(folder) as lock:
        ...     lock.path.name, lock.path.exists()
        ('.lightning-episodes.lock', True)
    """

    def __init__(self, folder: str | Path, owner: str = "") -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.record = {"pid": os.getpid(), "host": socket.gethostname(), "owner": owner}
        if os.environ.get(_JOB_ENV):
            self.record["job"] = os.environ[_JOB_ENV]
        self._held = False

    def acquire(self) -> None:
        """Take the lock, or take over a dead process's (or the same SLURM job's earlier) lock with a warning.

        Raises:
            RunFolderLockedError: naming the folder and the run holding it, if a live run (or one on another host,
                whose liveness cannot be checked) holds it.
        """
        for _ in range(3):
            try:
                descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._read()
                if holder is None or not self._stale(holder):
                    raise RunFolderLockedError(self._busy(holder), self.folder) from None
                warnings.warn(
                    f"taking over the lock of checkpoint folder {self.folder}: the run that held it "
                    f"({_describe(holder)}) is no longer running (killed?)",
                    stacklevel=2,
                )
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
                continue
            with os.fdopen(descriptor, "w") as handle:
                json.dump(self.record, handle)
            self._held = True
            return
        raise RunFolderLockedError(self._busy(self._read()), self.folder)

    def release(self) -> None:
        """Remove the lock file if this process holds it."""
        if self._held and self._read() == self.record:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self._held = False

    def _read(self) -> dict[str, Any] | None:
        try:
            holder = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return holder if isinstance(holder, dict) else None

    @staticmethod
    def _stale(holder: dict[str, Any]) -> bool:
        """A lock of a dead process on this host, or of an earlier run of this cluster job (requeued, maybe on
        another host)."""
        if holder.get("job") is not None and holder.get("job") == os.environ.get(_JOB_ENV):
            return True
        pid = holder.get("pid")
        return holder.get("host") == socket.gethostname() and isinstance(pid, int) and not _alive(pid)

    def _busy(self, holder: dict[str, Any] | None) -> str:
        who = _describe(holder) if holder else "unreadable lock file"
        return (
            f"checkpoint folder {self.folder} is in use by another run ({who}): one run per checkpoint folder; give "
            f"this run another folder (trainer.callbacks' dirpath), or delete {self.path} if that run is gone"
        )

    def __enter__(self) -> RunFolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _describe(holder: dict[str, Any]) -> str:
    owner = f", {holder['owner']}" if holder.get("owner") else ""
    return f"process {holder.get('pid')} on {holder.get('host')}{owner}"


#: The temporary file :func:`atomic_write` writes before renaming it: ``.<name>.tmp-<pid>`` beside the file.
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)$")


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Remove the temporary files that :func:`atomic_write` left in ``folder`` when its process was killed mid-write
    (a checkpoint's size each): only names of its pattern whose process is gone. Returns what was removed."""
    removed = []
    for path in folder.glob(".*.tmp-*"):
        match = _TEMPORARY.match(path.name)
        if match is None or not path.is_file() or _alive(int(match["pid"])):
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> None:
    """Write ``path`` through ``write(temporary path)``, then flush it to disk and rename it over ``path``.

    A failure or a kill during ``write`` leaves ``path`` as it was (the temporary file is removed on failure).

    Raises:
        OSError: from ``write`` or the rename, with ``filename`` set to ``path`` and the previous file kept.
    """
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(temporary)
        with temporary.open("rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            temporary.unlink()
        if isinstance(error, OSError) and not isinstance(error, OutputPathError):
            reason = error.strerror or str(error)
            kept = " (the previous file is kept)" if path.exists() else ""
            raise OutputPathError(f"could not write {path}: {reason}{kept}", path) from error
        raise
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """Flush the rename to disk (a folder's entries are data too); not every file system allows it."""
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


@contextlib.contextmanager
def owned_folders(
    checkpoints: Path | None, others: list[tuple[Path, str]], owner: str, then: Callable[[], object] | None = None
) -> Iterator[None]:
    """Check every output folder for writing and lock the checkpoint folder for the duration of the block.

    Folders created by the check are removed again, if still empty, when the block fails.

    Args:
        checkpoints: the checkpoint folder to check and lock (``None``: none).
        others: ``(folder, what)`` of the other output folders to check (the logger's).
        owner: recorded in the lock file.
        then: called after the other folders are checked, before the checkpoint folder is.
    """
    created: list[Path] = []
    lock: RunFolderLock | None = None
    try:
        for folder, what in others:
            created += probe_writable(folder, what)
        if checkpoints is not None:
            if then is not None:
                then()
            created += probe_writable(checkpoints, "checkpoint folder")
            lock = RunFolderLock(checkpoints, owner)
            lock.acquire()
            remove_stale_temporaries(checkpoints)  # the folder is this run's now: a killed write's leftovers go
        yield
    except BaseException:
        if lock is not None:
            lock.release()
            lock = None
        remove_empty(sorted(created, key=lambda p: len(p.parts), reverse=True))
        raise
    finally:
        if lock is not None:
            lock.release()
