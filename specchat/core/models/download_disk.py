"""Disk space and leftovers for downloads: free bytes, a size in words, and ``.part<PID>`` files of dead writers."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from specchat.core.models.errors import NotEnoughDiskSpaceError

FreeSpace = Callable[[Path], int]


def disk_free(path: Path) -> int:
    """Free bytes on the filesystem holding ``path`` (or its nearest existing parent)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover


def check_disk_space(needed: int, folder: Path, what: str, free_space: FreeSpace = disk_free) -> None:
    """Raise NotEnoughDiskSpaceError when ``folder`` has fewer than ``needed`` free bytes."""
    free = free_space(folder)
    if needed > free:
        raise NotEnoughDiskSpaceError(
            f"not enough disk space in {folder}: {what} needs {format_bytes(needed)}, "
            f"only {format_bytes(free)} free; free {format_bytes(needed - free)} or choose another folder"
        )


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (a process of another user counts as alive)."""
    if pid <= 0:
        return False
    if sys.platform == "win32":  # os.kill(pid, 0) would terminate the process there
        import ctypes

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return ctypes.get_last_error() == 5  # access denied: it exists
        code = ctypes.c_ulong()
        try:
            return bool(kernel32.GetExitCodeProcess(handle, ctypes.byref(code))) and code.value == 259
        finally:
            kernel32.CloseHandle(handle)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphaned_parts(folder: Path, name: str, stale_after: float = 86400.0) -> list[Path]:
    """Delete ``<name>.part<PID>`` files in ``folder`` whose writer is gone; return what was removed.

    A file is orphaned when its PID is not alive, or when it has not been
    written for ``stale_after`` seconds (its PID was reused by another
    process). Resumable downloads (``*.incomplete``) are never touched.
    """
    removed: list[Path] = []
    prefix = name + ".part"
    try:
        candidates = [p for p in Path(folder).iterdir() if p.name.startswith(prefix)]
    except OSError:
        return removed
    now = time.time()
    for path in candidates:
        pid_text = path.name[len(prefix) :]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or not path.is_file() or path.is_symlink():
            continue
        try:
            old = now - path.stat().st_mtime > stale_after
            if old or not pid_alive(int(pid_text)):
                path.unlink()
                removed.append(path)
        except OSError:
            continue
    return removed
