"""An exclusive lock between processes, held on a small lock file (fcntl.flock or msvcrt.locking).

The lock file is created when missing and never deleted: deleting it would let
a third process lock a fresh file while a second still holds the old one.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from specchat.core.types import SpecchatError


class LockTimeoutError(SpecchatError):
    """Another process held the lock for longer than we were willing to wait."""


if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _try_lock(fd: int) -> bool:
        os.lseek(fd, 0, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _unlock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


@contextlib.contextmanager
def held(path: Path, *, wait_s: float = 10.0, poll_s: float = 0.01) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for the ``with`` block.

    Raises OSError when the lock file cannot be created, LockTimeoutError after ``wait_s``.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while not _try_lock(fd):
            if time.monotonic() >= deadline:
                raise LockTimeoutError(f"{path.name} is held by another process")
            time.sleep(poll_s)
        try:
            yield
        finally:
            _unlock(fd)
    finally:
        os.close(fd)
