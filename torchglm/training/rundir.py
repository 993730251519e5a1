"""The run directory of ``train.py``: chosen, locked, and left as it was on failure.

A run writes ``config.yaml``, ``hparams.yaml``, TensorBoard events, checkpoints
and ``metrics.json`` into one directory. :class:`RunDir` makes that safe:

* **one run at a time**: an exclusive ``flock`` on ``RUN/.lock`` (released by the
  kernel when the process ends, even by SIGKILL), so a second ``train.py`` on
  the same directory fails at once with an error naming the holder;
* **all or nothing on failure**: a directory this run created is removed; one
  that existed (``--resume``, a rerun) is copied aside first and restored. GLM run
  directories are small (kilobytes to a few megabytes), so the copy is cheap. A
  run killed outright (SIGKILL, power loss) keeps what it wrote, ``last.ckpt``
  included, for ``--resume`` (and a backup copy beside it, removed by the next
  run that locks the directory).
* **interruptible**: SIGTERM and SIGINT wait while the directory is locked, backed
  up, restored or released (:func:`signals_deferred`), so an interruption never
  leaves a half-made backup or a half-restored directory.
* **a full disk is bad input**: a write that fails (``ENOSPC``, ``EFBIG``, ...) is
  reported as ``run_dir: expected a writable directory with free space`` and the
  directory is restored (:func:`disk_error`).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import threading
from contextlib import contextmanager
from pathlib import Path

from .._validation import InputError, fail

__all__ = ["RunDir", "disk_error", "next_version", "signals_deferred"]

LOCK_NAME = ".lock"
#: The temporary files of the run's atomic writers (``tmp`` then ``os.replace``):
#: ``metrics.json.tmp``, ``.model.ckpt.tmp-PID``, ``checkpoints/.last.ckpt.tmp-PID``.
TEMPORARIES = ("*.tmp", ".*.tmp-*")


@contextmanager
def signals_deferred():
    """Hold SIGINT and SIGTERM until the block ends; their handlers run then.

    A blocked signal stays pending in the kernel, so nothing is lost; Python runs
    the handler at the first bytecode after the mask is restored. Off the main
    thread (where Python runs no handlers) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def disk_error(path: Path, err: OSError) -> InputError:
    """The one message for a write into the run directory that failed (a full or
    read-only disk, a file size limit)."""
    why = err.strerror
    if why is None:
        # shutil.copytree collects its files' errors as text: "[Errno 28] No space ...".
        code = re.search(r"\[Errno (\d+)\]", str(err))
        why = os.strerror(int(code.group(1))) if code else type(err).__name__
    return fail("run_dir", "a writable directory with free space", f"'{path}' ({why})")


def next_version(root: Path) -> Path:
    """``root/version_<N>`` with the smallest ``N`` whose directory does not exist yet."""
    n = 0
    while (root / f"version_{n}").exists():
        n += 1
    return root / f"version_{n}"


class RunDir:
    """Lock ``path`` and remember its state, to restore it with :meth:`rollback`.

    Args:
        path: the run directory (created if absent).
        primary: whether this process owns the directory (rank 0 of a distributed
            run); other ranks neither lock nor restore.

    Raises:
        InputError: ``path`` is an existing file or cannot be created, or another
            process holds its lock.
    """

    def __init__(self, path: Path, primary: bool = True):
        self.path = Path(path)
        self.primary = primary
        self.created = False
        self.backup: Path | None = None
        self._fd: int | None = None
        if not primary:
            return
        with signals_deferred():
            self._open()

    def _open(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise fail(
                "run_dir",
                "a directory or a path that does not exist yet",
                f"'{self.path}' (an existing file)",
            )
        try:
            self.path.mkdir(parents=True)
            self.created = True
        except FileExistsError:
            pass
        except OSError as err:
            raise fail(
                "run_dir", "a directory that can be created", f"'{self.path}' ({err.strerror})"
            ) from None
        try:
            self._lock()
        except OSError as err:  # no room for the lock file or the holder's pid in it
            self._unlock()
            if self.created:
                shutil.rmtree(self.path, ignore_errors=True)
            raise disk_error(self.path, err) from None
        if not self.created:
            self._back_up()

    def _lock(self) -> None:
        lock = self.path / LOCK_NAME
        while True:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                if self.created:
                    shutil.rmtree(self.path, ignore_errors=True)
                raise fail(
                    "run_dir",
                    "a directory no other train.py is writing to",
                    f"'{self.path}' (in use by process {holder})",
                ) from None
            # The holder before us may have removed the lock file after we opened it:
            # then our lock is on an unlinked file and does not exclude anyone.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(lock))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self._fd = fd
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())

    def _back_up(self) -> None:
        # Backups left by runs killed outright: we hold the lock, so their owners are gone.
        for stale in self.path.parent.glob(f".{self.path.name}.backup-*"):
            shutil.rmtree(stale, ignore_errors=True)
        self.backup = self.path.with_name(f".{self.path.name}.backup-{os.getpid()}")
        try:
            shutil.copytree(self.path, self.backup, ignore=shutil.ignore_patterns(LOCK_NAME), symlinks=True)
        except OSError as err:
            # No room for the copy: the directory is untouched; drop the partial copy.
            shutil.rmtree(self.backup, ignore_errors=True)
            self.backup = None
            self._unlock()
            raise disk_error(self.path, err) from None

    def remove_temporaries(self) -> None:
        """Remove what an interrupted atomic write left (its temporary file)."""
        if not self.primary:
            return
        for folder in (self.path, self.path / "checkpoints"):
            for pattern in TEMPORARIES:
                for stale in folder.glob(pattern):
                    stale.unlink(missing_ok=True)

    @signals_deferred()
    def rollback(self) -> None:
        """Put the directory back as it was before this run (remove it if this run made it)."""
        if not self.primary:
            return
        if self.created:
            self._unlock()
            shutil.rmtree(self.path, ignore_errors=True)
            return
        # Restore in place, keeping the lock file (and our lock) until the end.
        for entry in self.path.iterdir():
            if entry.name == LOCK_NAME:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        if self.backup is not None:
            for entry in self.backup.iterdir():
                os.replace(entry, self.path / entry.name)
            shutil.rmtree(self.backup, ignore_errors=True)
            self.backup = None
        self._unlock()

    @signals_deferred()
    def commit(self) -> None:
        """The run succeeded: drop the backup and release the lock."""
        if not self.primary:
            return
        if self.backup is not None:
            shutil.rmtree(self.backup, ignore_errors=True)
            self.backup = None
        self._unlock()

    def _unlock(self) -> None:
        if self._fd is None:
            return
        lock = self.path / LOCK_NAME
        # Unlink while still holding the lock, so a waiter that opened the old file
        # sees (by inode) that it is gone and retries on a fresh one.
        try:
            lock.unlink()
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None
