"""Opening the conversation database so that history is never lost.

A file that is not a database is moved aside under a name no earlier copy has
(never deleted, never overwritten) and a fresh one started; a file from a newer
specchat, or one that is locked or unreadable, is left untouched and the
session works in memory. Opening and setting aside happen under a lock file, so
two instances starting together cannot both set aside. :func:`open_database`
returns a one-line notice saying what happened.
"""

from __future__ import annotations

import itertools
import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from specchat.core import filelock

from .store_schema import NewerSchemaError, check_version, upgrade

log = logging.getLogger(__name__)

LOCK_WAIT_S = 10.0  # how long to wait for another instance that is opening the same file

_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
_UNSAVED = "conversations will not be saved this session."


@dataclass
class Opened:
    """An open connection, whether this SQLite has FTS5, and the notice ("" when all went well)."""

    db: sqlite3.Connection
    fts5: bool
    notice: str = ""


def _decoded(raw: bytes) -> str:
    """SQLite text as Python text; bytes that are not UTF-8 become U+FFFD rather than an error."""
    return raw.decode("utf-8", "replace")


def is_corrupt(exc: sqlite3.Error) -> bool:
    """True only for a file that is not (or no longer) a database; locks, permissions and the rest are False."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None and code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return True
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text


def connect(path: Path | str) -> Opened:
    """Open ``path`` (or ``":memory:"``) and bring it to the current schema; raises sqlite3.Error or
    NewerSchemaError with the file left as it was."""
    db = sqlite3.connect(path, isolation_level=None, timeout=2.0)
    try:
        db.row_factory = sqlite3.Row
        db.text_factory = _decoded
        check_version(db)  # before anything is written: a newer specchat's file stays as it is
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        fts5 = upgrade(db)
        db.execute("SELECT count(*) FROM spans").fetchone()
    except BaseException:
        db.close()
        raise
    return Opened(db, fts5)


def move_aside(path: Path) -> Path:
    """Rename the file (and its -wal/-shm) to a name no earlier copy has; return the new path."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in itertools.count(1):
        aside = path.with_name(f"{path.name}.unreadable-{stamp}" + (f"-{n}" if n > 1 else ""))
        try:  # claim the name: O_EXCL fails on any earlier copy, ours or another instance's
            os.close(os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            continue
        break
    try:
        os.replace(path, aside)  # onto the empty placeholder claimed above
    except OSError:
        aside.unlink(missing_ok=True)
        raise
    for suffix in ("-wal", "-shm"):
        extra = path.with_name(path.name + suffix)
        if extra.exists():
            os.replace(extra, aside.with_name(aside.name + suffix))
    return aside


def _open_or_set_aside(path: Path) -> Opened:
    """Open ``path``; set it aside only when it is not a database; otherwise fall back to memory."""
    notice = ""
    try:
        return connect(path)
    except NewerSchemaError as exc:
        notice = f"The conversation database {exc}; it was left untouched and {_UNSAVED}"
    except sqlite3.Error as exc:
        if not is_corrupt(exc):  # locked, no permission...: leave the file alone
            notice = f"The conversation database could not be opened ({exc}); {_UNSAVED}"
        else:
            try:
                aside = move_aside(path)
            except OSError as move_exc:
                notice = (
                    f"The conversation database could not be read ({exc}) nor set aside "
                    f"({move_exc.strerror or move_exc}); it was left as it is and {_UNSAVED}"
                )
            else:
                notice = (
                    f"The conversation database could not be read ({exc}); it was kept as {aside.name} "
                    "and a new one was started."
                )
                try:
                    opened = connect(path)
                except sqlite3.Error as new_exc:
                    notice += f" The new one could not be opened either ({new_exc}); {_UNSAVED}"
                else:
                    opened.notice = notice
                    return opened
    opened = connect(":memory:")
    opened.notice = notice
    return opened


def open_database(path: Path) -> Opened:
    """Open the store's file as the module docstring says; the notice is logged as a warning too."""
    if str(path) == ":memory:":
        return connect(":memory:")
    try:
        # Held while opening and (if need be) setting aside, not for the session:
        # two instances may share the database, but only one may decide to replace it.
        with filelock.held(path.with_name(path.name + ".lock"), wait_s=LOCK_WAIT_S):
            opened = _open_or_set_aside(path)
    except (OSError, filelock.LockTimeoutError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        opened = connect(":memory:")
        opened.notice = (
            f"The conversation database could not be opened (its lock file: {reason}); "
            "conversations will not be saved this session."
        )
    if opened.notice:
        log.warning(opened.notice)
    return opened
