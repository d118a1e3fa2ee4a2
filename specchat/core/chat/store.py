"""SQLite persistence of conversations, messages and per-token verdict spans.

One file, ``paths.data_dir()/conversations.sqlite3``, in WAL mode. A reply is
written as it streams: every verified round is its own transaction, so a
killed process loses at most the round in flight.

History is never lost on opening: a file that is not a database is moved
aside under a name no earlier copy has (never deleted, never overwritten) and a
fresh one started; a file from a newer specchat, or one that is locked or
unreadable, is left untouched and this session works in memory. Opening and
setting aside happen under a lock file, so two instances starting together
cannot both set aside. ``store.notice`` then holds a one-line message.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from specchat.core import filelock, paths
from specchat.core.jsonfile import UnreadableFileError, parse_json
from specchat.core.types import Finished, FinishReason, SpecchatError, TokenKind, Verified

from .presets import SamplerPreset, preset_of
from .transcript import ReplyFigures, TokenDetail, TokenSpan, spans_of

log = logging.getLogger(__name__)

DB_FILENAME = "conversations.sqlite3"
SCHEMA_VERSION = 5  # 2: messages form a tree (parent_id), a conversation shows the path to its leaf_id
#                      and has its own system prompt; 3: spans carry the token X-ray's detail;
#                      4: an FTS5 index of titles and message text (search); 5: a conversation keeps
#                      its sampler preset (conversations.sampler, JSON)
LOCK_WAIT_S = 10.0  # how long to wait for another instance that is opening the same file

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    leaf_id INTEGER,
    system_prompt TEXT NOT NULL DEFAULT '',
    sampler TEXT  -- SamplerPreset.as_dict() as JSON; NULL: none kept (the controls stay as they are)
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    finish_reason TEXT,
    stats TEXT,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, position);
CREATE TABLE IF NOT EXISTS spans (
    id INTEGER PRIMARY KEY,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    round INTEGER NOT NULL,
    target_prob REAL,
    draft_prob REAL,
    detail TEXT  -- TokenDetail.pack() as compact JSON; NULL for spans stored without one
);
CREATE INDEX IF NOT EXISTS spans_by_message ON spans(message_id, seq);
"""


class StoreError(SpecchatError):
    """A store operation failed; ``str(error)`` is a one-line message."""


class NewerSchemaError(StoreError):
    """The file was written by a newer specchat; it is left as it is."""


_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26


def _migrate_to_branches(db: sqlite3.Connection) -> None:
    """Schema 1 -> 2, in one transaction: each message's parent is the one before it; the last is the leaf."""
    def has(table: str, column: str) -> bool:
        return any(r[1] == column for r in db.execute(f"PRAGMA table_info({table})"))

    with db:
        db.execute("BEGIN")
        if not has("messages", "parent_id"):
            db.execute("ALTER TABLE messages ADD COLUMN parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE")
        if not has("conversations", "leaf_id"):
            db.execute("ALTER TABLE conversations ADD COLUMN leaf_id INTEGER")
        if not has("conversations", "system_prompt"):
            db.execute("ALTER TABLE conversations ADD COLUMN system_prompt TEXT NOT NULL DEFAULT ''")
        db.execute(
            "UPDATE messages SET parent_id = (SELECT p.id FROM messages p"
            " WHERE p.conversation_id = messages.conversation_id"
            " AND p.position < messages.position ORDER BY p.position DESC LIMIT 1)"
        )
        db.execute(
            "UPDATE conversations SET leaf_id = (SELECT m.id FROM messages m WHERE m.conversation_id = conversations.id"
            " ORDER BY m.position DESC LIMIT 1)"
        )
        db.execute("UPDATE schema_version SET version = 2")


def _migrate_to_details(db: sqlite3.Connection) -> None:
    """Schema 2 -> 3, in one transaction: spans get a ``detail`` column (NULL for the spans already stored)."""
    with db:
        db.execute("BEGIN")
        if not any(r[1] == "detail" for r in db.execute("PRAGMA table_info(spans)")):
            db.execute("ALTER TABLE spans ADD COLUMN detail TEXT")
        db.execute("UPDATE schema_version SET version = 3")


def _migrate_to_samplers(db: sqlite3.Connection) -> None:
    """Schema 4 -> 5: conversations get a ``sampler`` column (NULL for those already stored).

    The version itself moves on in :func:`_ensure_search_index`, which runs next.
    """
    with db:
        db.execute("BEGIN IMMEDIATE")  # another instance may be adding it too: look under the write lock
        if not any(r[1] == "sampler" for r in db.execute("PRAGMA table_info(conversations)")):
            db.execute("ALTER TABLE conversations ADD COLUMN sampler TEXT")


def _has_fts5(db: sqlite3.Connection) -> bool:
    """True when this SQLite build has FTS5 (else search falls back to LIKE)."""
    return any(r[0] == "ENABLE_FTS5" for r in db.execute("PRAGMA compile_options"))


# One FTS5 row per message (rowid = the message's id) and one per conversation title (rowid = -its id),
# kept in step by triggers, so every write path (and ON DELETE CASCADE) updates it.
_SEARCH_TRIGGERS = {
    "search_message_added": "AFTER INSERT ON messages BEGIN INSERT INTO search (rowid, text, conversation_id)"
                            " VALUES (new.id, new.content, new.conversation_id); END",
    "search_message_changed": "AFTER UPDATE OF content ON messages BEGIN"
                              " UPDATE search SET text = new.content WHERE rowid = new.id; END",
    "search_message_deleted": "AFTER DELETE ON messages BEGIN DELETE FROM search WHERE rowid = old.id; END",
    "search_title_added": "AFTER INSERT ON conversations BEGIN INSERT INTO search (rowid, text, conversation_id)"
                          " VALUES (-new.id, new.title, new.id); END",
    "search_title_changed": "AFTER UPDATE OF title ON conversations BEGIN"
                            " UPDATE search SET text = new.title WHERE rowid = -new.id; END",
    "search_title_deleted": "AFTER DELETE ON conversations BEGIN DELETE FROM search WHERE rowid = -old.id; END",
}


def _ensure_search_index(db: sqlite3.Connection, fts5: bool) -> None:
    """Schema 4, in one transaction: the FTS5 index and its triggers, built from the rows already stored.

    Rebuilt whenever a trigger is missing (a file last opened by a build without FTS5, whose triggers
    were dropped so that its writes did not fail, may have rows the index lacks).
    """
    def triggers() -> set[str]:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        return names & set(_SEARCH_TRIGGERS)

    version = db.execute("SELECT max(version) FROM schema_version").fetchone()[0]
    if version == SCHEMA_VERSION and triggers() == (set(_SEARCH_TRIGGERS) if fts5 else set()):
        return  # nothing to write: two instances opening an up-to-date file do not contend
    with db:
        db.execute("BEGIN IMMEDIATE")  # the write lock first, then look again: another instance may have done it
        if not fts5:
            for name in _SEARCH_TRIGGERS:
                db.execute(f"DROP TRIGGER IF EXISTS {name}")
        else:
            if triggers() != set(_SEARCH_TRIGGERS):
                db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS search USING fts5(text, conversation_id UNINDEXED)")
                db.execute("DELETE FROM search")
                db.execute("INSERT INTO search (rowid, text, conversation_id) SELECT -id, title, id FROM conversations")
                db.execute("INSERT INTO search (rowid, text, conversation_id)"
                           " SELECT id, content, conversation_id FROM messages")
                for name, body in _SEARCH_TRIGGERS.items():
                    db.execute(f"CREATE TRIGGER IF NOT EXISTS {name} {body}")
        db.execute("UPDATE schema_version SET version = ? WHERE version < ?", (SCHEMA_VERSION, SCHEMA_VERSION))


def _fts_query(text: str) -> str:
    """User text as an FTS5 query: each term a quoted phrase (quotes doubled), prefix-matched, all required."""
    terms = [t for t in text.split() if any(c.isalnum() for c in t)]
    return " ".join('"' + t.replace('"', '""') + '"*' for t in terms)


def _like_pattern(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _snippet_around(text: str, needle: str, mark: tuple[str, str] = ("", ""), width: int = 60) -> str:
    """A short piece of ``text`` around the first ``needle`` (case-insensitive, between ``mark``'s two strings),
    for the LIKE fallback."""
    found = text.lower().find(needle.lower())
    at = max(found, 0)
    start = max(at - width // 2, 0)
    end = max(start + width, at + len(needle)) if found >= 0 else start + width
    if found >= 0:
        text = text[:at] + mark[0] + text[at:at + len(needle)] + mark[1] + text[at + len(needle):]
        end += len(mark[0]) + len(mark[1])
    piece = " ".join(text[start:end].split())
    return ("…" if start else "") + piece + ("…" if end < len(text) else "")


def _detail_json(span: TokenSpan) -> str | None:
    return None if span.detail is None else json.dumps(span.detail.pack(), ensure_ascii=False, separators=(",", ":"))


def _detail_of(text: object) -> TokenDetail | None:
    """A span's stored detail, or None when it has none or it does not read back (``_bad`` tells which)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return TokenDetail.unpack(parse_json(text, "detail"))
    except UnreadableFileError:
        return None


def _text(value: object) -> str:
    """A text column's value as text (SQLite lets any column hold a number or a blob)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _probability(value: object) -> float | None:
    """A stored probability: a number from 0 to 1, else None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0
    return float(value) if ok else None  # type: ignore[arg-type]


_KINDS = {kind.value: kind for kind in TokenKind}


def _decoded(raw: bytes) -> str:
    """SQLite text as Python text; bytes that are not UTF-8 become U+FFFD rather than an error."""
    return raw.decode("utf-8", "replace")


def _stats_of(text: object, problems: list[str]) -> dict[str, Any] | None:
    """A message's stored figures without the values that do not read back; None when there are none."""
    if text is None or text == "":
        return None
    try:
        stats = parse_json(_text(text), "the figures column")
    except UnreadableFileError as exc:
        problems.append(f"{exc} (left out)")
        return None
    if not isinstance(stats, dict):
        problems.append("the figures column is not an object (left out)")
        return None
    skipped: list[str] = []
    ReplyFigures.from_dict(stats, skipped)
    if skipped:
        problems.append(f"figures {', '.join(skipped)} of the wrong type or out of range (left out)")
    return {key: value for key, value in stats.items() if key not in skipped}


def _inserted_id(cur: sqlite3.Cursor) -> int:
    """The id SQLite gave the row that ``cur``'s INSERT just added."""
    if cur.lastrowid is None:  # only when the statement was no INSERT
        raise StoreError("the database did not say which row it added")
    return cur.lastrowid


def _is_corrupt(exc: sqlite3.Error) -> bool:
    """True only for a file that is not (or no longer) a database; locks, permissions and the rest are False."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None and code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return True
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text


@dataclass
class StoredMessage:
    id: int
    role: str
    content: str
    spans: list[TokenSpan] = field(default_factory=list)
    stats: dict[str, Any] | None = None
    finish_reason: str | None = None
    version: int = 1  # which of the versions at this place in the conversation (1-based)
    versions: int = 1  # how many there are (regenerated replies, edited messages)


@dataclass(frozen=True)
class ConversationInfo:
    id: int
    title: str
    created: float
    updated: float
    system_prompt: str = ""


class ConversationStore:
    """Conversations in one SQLite file. Use from one thread."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path else paths.data_dir() / DB_FILENAME
        self.notice = ""  # one-line message when the file was set aside or left alone
        if str(self.path) == ":memory:":
            self._db = self._open(":memory:")
            return
        try:
            # Held while opening and (if need be) setting aside, not for the session:
            # two instances may share the database, but only one may decide to replace it.
            with filelock.held(self.path.with_name(self.path.name + ".lock"), wait_s=LOCK_WAIT_S):
                self._db = self._open_or_set_aside()
        except (OSError, filelock.LockTimeoutError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.notice = (
                f"The conversation database could not be opened (its lock file: {reason}); "
                "conversations will not be saved this session."
            )
            self._db = self._open(":memory:")
        if self.notice:
            log.warning(self.notice)

    def _open_or_set_aside(self) -> sqlite3.Connection:
        """Open ``self.path``; set it aside only when it is not a database; otherwise fall back to memory."""
        unsaved = "conversations will not be saved this session."
        try:
            return self._open(self.path)
        except NewerSchemaError as exc:
            self.notice = f"The conversation database {exc}; it was left untouched and {unsaved}"
        except sqlite3.Error as exc:
            if not _is_corrupt(exc):  # locked, no permission...: leave the file alone
                self.notice = f"The conversation database could not be opened ({exc}); {unsaved}"
            else:
                try:
                    aside = self._move_aside()
                except OSError as move_exc:
                    self.notice = (
                        f"The conversation database could not be read ({exc}) nor set aside "
                        f"({move_exc.strerror or move_exc}); it was left as it is and {unsaved}"
                    )
                else:
                    self.notice = (
                        f"The conversation database could not be read ({exc}); it was kept as {aside.name} "
                        "and a new one was started."
                    )
                    try:
                        return self._open(self.path)
                    except sqlite3.Error as new_exc:
                        self.notice += f" The new one could not be opened either ({new_exc}); {unsaved}"
        return self._open(":memory:")

    def _open(self, path: Path | str) -> sqlite3.Connection:
        db = sqlite3.connect(path, isolation_level=None, timeout=2.0)
        try:
            db.row_factory = sqlite3.Row
            db.text_factory = _decoded
            # The version is read before anything is written: a newer specchat's file stays as it is.
            has_version = db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
            ).fetchone()
            if has_version:
                row = db.execute("SELECT max(version) FROM schema_version").fetchone()
                version = row[0]
                if version is not None and (not isinstance(version, int) or version > SCHEMA_VERSION):
                    raise NewerSchemaError(
                        f"was written by a newer specchat (schema version {version!r}; this one reads up to "
                        f"{SCHEMA_VERSION})"
                    )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.executescript(_SCHEMA)
            row = db.execute("SELECT max(version) FROM schema_version").fetchone()
            if row[0] is None:
                db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            else:
                if row[0] < 2:
                    _migrate_to_branches(db)
                if row[0] < 3:
                    _migrate_to_details(db)
                if row[0] < 5:
                    _migrate_to_samplers(db)
            self._fts5 = _has_fts5(db)
            _ensure_search_index(db, self._fts5)  # schema 3 -> 4, and a new file's index
            db.execute("CREATE INDEX IF NOT EXISTS messages_by_parent ON messages(parent_id)")
            db.execute("SELECT count(*) FROM spans").fetchone()
        except BaseException:
            db.close()
            raise
        return db

    def _move_aside(self) -> Path:
        """Rename the file (and its -wal/-shm) to a name no earlier copy has; return the new path."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for n in itertools.count(1):
            aside = self.path.with_name(f"{self.path.name}.unreadable-{stamp}" + (f"-{n}" if n > 1 else ""))
            try:  # claim the name: O_EXCL fails on any earlier copy, ours or another instance's
                os.close(os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                continue
            break
        try:
            os.replace(self.path, aside)  # onto the empty placeholder claimed above
        except OSError:
            aside.unlink(missing_ok=True)
            raise
        for suffix in ("-wal", "-shm"):
            extra = self.path.with_name(self.path.name + suffix)
            if extra.exists():
                os.replace(extra, aside.with_name(aside.name + suffix))
        return aside

    def close(self) -> None:
        self._db.close()

    # -- conversations ---------------------------------------------------------------

    def create_conversation(self, title: str = "New conversation", system_prompt: str = "") -> int:
        now = time.time()
        cur = self._db.execute(
            "INSERT INTO conversations (title, created, updated, system_prompt) VALUES (?, ?, ?, ?)",
            (title, now, now, system_prompt),
        )
        return _inserted_id(cur)

    def set_system_prompt(self, conversation_id: int, system_prompt: str) -> None:
        self._db.execute("UPDATE conversations SET system_prompt = ? WHERE id = ?", (system_prompt, conversation_id))

    def set_sampler(self, conversation_id: int, preset: SamplerPreset) -> None:
        """Keep ``preset`` (the sampler in use) with the conversation; it comes back when it is opened."""
        self._db.execute("UPDATE conversations SET sampler = ? WHERE id = ?",
                         (json.dumps(preset.as_dict(), ensure_ascii=False), conversation_id))

    def sampler(self, conversation_id: int) -> SamplerPreset | None:
        """The sampler kept with the conversation; None when there is none or it does not read back (logged)."""
        row = self._db.execute("SELECT sampler FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        text = row[0] if row is not None else None
        if text is None:
            return None
        try:
            preset = preset_of(parse_json(text, "a conversation's sampler")) if isinstance(text, str) else None
        except UnreadableFileError as exc:
            log.warning("conversation %d: %s; its sampler is not restored", conversation_id, exc)
            return None
        if preset is None:
            log.warning("conversation %d: its stored sampler %.80r is not valid; not restored", conversation_id, text)
        return preset

    def conversations(self) -> list[ConversationInfo]:
        """All conversations, most recently updated first."""
        rows = self._db.execute(
            "SELECT id, title, created, updated, system_prompt FROM conversations ORDER BY updated DESC, id DESC"
        )
        return [ConversationInfo(r["id"], r["title"], r["created"], r["updated"], r["system_prompt"]) for r in rows]

    def conversation(self, conversation_id: int) -> ConversationInfo:
        r = self._db.execute(
            "SELECT id, title, created, updated, system_prompt FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        if r is None:
            raise StoreError(f"no conversation with id {conversation_id}")
        return ConversationInfo(r["id"], r["title"], r["created"], r["updated"], r["system_prompt"])

    def rename(self, conversation_id: int, title: str) -> None:
        self._db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def delete(self, conversation_id: int) -> None:
        self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # -- messages ----------------------------------------------------------------------

    def add_message(self, conversation_id: int, role: str, content: str) -> int:
        """Append a message after the conversation's shown path."""
        with self._db:
            self._db.execute("BEGIN")
            return self._insert_message(conversation_id, role, content, self._leaf(conversation_id))

    def _leaf(self, conversation_id: int) -> int | None:
        row = self._db.execute("SELECT leaf_id FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return row[0] if row is not None else None

    def _path_ids(self, conversation_id: int) -> list[int]:
        """The ids from the first message to the shown leaf.

        The walk up the parents is a UNION, which stops at a message already on the path, so parents that
        form a loop (a damaged file) cannot make it endless; such a loop is broken at its first message.
        """
        rows = self._db.execute(
            "WITH RECURSIVE path(id, parent, position) AS ("
            " SELECT id, parent_id, position FROM messages"
            "  WHERE id = (SELECT leaf_id FROM conversations WHERE id = ?) AND conversation_id = ?"
            " UNION SELECT m.id, m.parent_id, m.position FROM messages m JOIN path ON m.id = path.parent"
            "  WHERE m.conversation_id = ?)"
            " SELECT id, parent FROM path ORDER BY position, id",
            (conversation_id, conversation_id, conversation_id),
        ).fetchall()
        ids = [r[0] for r in rows]
        if rows and all(r[1] in ids for r in rows):
            self._warn(f"{self.path}: conversation {conversation_id}: its messages' parents form a loop; "
                       f"message {ids[0]} now starts it")
            try:
                self._db.execute("UPDATE messages SET parent_id = NULL WHERE id = ?", (ids[0],))
            except sqlite3.Error as exc:  # a read-only file: shown the same way, repaired another time
                log.info("the loop could not be repaired: %s", exc)
        return ids

    _warned: ClassVar[set[str]] = set()  # by every store of this process (the lookup memory opens its own)

    def _warn(self, line: str) -> None:
        """Log ``line`` (what did not read back, and what was done) once a session."""
        if line not in self._warned:
            self._warned.add(line)
            log.warning(line)

    def _insert_message(self, conversation_id: int, role: str, content: str, parent: int | None) -> int:
        row = self._db.execute("SELECT position FROM messages WHERE id = ?", (parent,)).fetchone() if parent else None
        cur = self._db.execute(
            "INSERT INTO messages (conversation_id, parent_id, position, role, content, created)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (conversation_id, parent, row[0] + 1 if row else 0, role, content, time.time()),
        )
        message_id = _inserted_id(cur)
        self._db.execute("UPDATE conversations SET leaf_id = ?, updated = ? WHERE id = ?",
                         (message_id, time.time(), conversation_id))
        return message_id

    def append_spans(self, message_id: int, spans: Iterable[TokenSpan], text: str,
                     stats: dict[str, Any] | None = None) -> None:
        """Add one round's spans and ``text`` (and the figures so far) to a streamed message, in one transaction."""
        with self._db:
            self._db.execute("BEGIN")
            self._append_spans(message_id, spans, text, stats)

    def _append_spans(self, message_id: int, spans: Iterable[TokenSpan], text: str,
                      stats: dict[str, Any] | None) -> None:
        start = self._db.execute(
            "SELECT coalesce(max(seq), -1) + 1 FROM spans WHERE message_id = ?", (message_id,)
        ).fetchone()[0]
        self._db.executemany(
            "INSERT INTO spans (message_id, seq, kind, text, round, target_prob, draft_prob, detail)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (message_id, start + i, s.kind.value, s.text, s.round, s.target_prob, s.draft_prob, _detail_json(s))
                for i, s in enumerate(spans)
            ],
        )
        self._db.execute(
            "UPDATE messages SET content = content || ?, stats = coalesce(?, stats) WHERE id = ?",
            (text, json.dumps(stats) if stats is not None else None, message_id),
        )

    def start_reply(self, conversation_id: int, spans: Iterable[TokenSpan], text: str, stats: dict[str, Any],
                    *, keep: int | None = None, user_text: str | None = None) -> int:
        """Store a reply's first round as a new assistant message, in one transaction.

        With ``keep`` (regenerate, edit and resend) the reply (after ``user_text``, an edited message)
        becomes a new version after the first ``keep`` messages of the shown path; the earlier version
        stays stored as a branch the conversation can flip back to.
        """
        with self._db:
            self._db.execute("BEGIN")
            if keep is None:
                parent = self._leaf(conversation_id)
            else:
                path = self._path_ids(conversation_id)
                parent = path[keep - 1] if 0 < keep <= len(path) else None
            if user_text is not None:
                parent = self._insert_message(conversation_id, "user", user_text, parent)
            message_id = self._insert_message(conversation_id, "assistant", "", parent)
            self._append_spans(message_id, spans, text, stats)
        return message_id

    def switch_version(self, conversation_id: int, message_id: int, step: int) -> bool:
        """Show the previous (-1) or next (+1) version at a message's place, with the latest path below it."""
        with self._db:
            self._db.execute("BEGIN")
            row = self._db.execute("SELECT parent_id FROM messages WHERE id = ? AND conversation_id = ?",
                                   (message_id, conversation_id)).fetchone()
            if row is None:
                return False
            siblings = self._siblings(conversation_id, row[0])
            index = siblings.index(message_id) + step
            if not 0 <= index < len(siblings):
                return False
            leaf = siblings[index]
            seen = {leaf}
            while True:  # follow the most recent child down to a leaf (a damaged file's loop ends it too)
                child = self._db.execute("SELECT max(id) FROM messages WHERE parent_id = ?", (leaf,)).fetchone()[0]
                if child is None or child in seen:
                    break
                leaf = child
                seen.add(leaf)
            self._db.execute("UPDATE conversations SET leaf_id = ? WHERE id = ?", (leaf, conversation_id))
        return True

    def _siblings(self, conversation_id: int, parent: int | None) -> list[int]:
        rows = self._db.execute(
            "SELECT id FROM messages WHERE conversation_id = ? AND parent_id IS ? ORDER BY id",
            (conversation_id, parent),
        ).fetchall()
        return [r[0] for r in rows]

    def finish_message(self, message_id: int, finish_reason: str, stats: dict[str, Any]) -> None:
        self._db.execute(
            "UPDATE messages SET finish_reason = ?, stats = ? WHERE id = ?",
            (finish_reason, json.dumps(stats), message_id),
        )

    def set_stats_entry(self, message_id: int, key: str, value: dict[str, Any]) -> None:
        """Set one entry of a stored message's figures (a race run on it), leaving the others as stored."""
        self._db.execute("UPDATE messages SET stats = json_set(coalesce(stats, '{}'), ?, json(?)) WHERE id = ?",
                         (f"$.{key}", json.dumps(value), message_id))

    def messages(self, conversation_id: int) -> list[StoredMessage]:
        """The shown path of the conversation, in order, each message with its spans and its version.

        What does not read back (figures that are not JSON or hold a value of the wrong type, a span of an
        unknown kind, a text in a number column, an X-ray detail of another shape) is left out, with one
        logged line per message naming the file and what was wrong.
        """
        out: list[StoredMessage] = []
        for message_id in self._path_ids(conversation_id):
            r = self._db.execute(
                "SELECT id, parent_id, role, content, finish_reason, stats FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            siblings = self._siblings(conversation_id, r["parent_id"])
            problems: list[str] = []
            spans = self._spans(message_id, problems)
            stats = _stats_of(r["stats"], problems)
            if problems:
                self._warn(f"{self.path}: message {message_id} does not read back whole: {'; '.join(problems)}")
            finish_reason = None if r["finish_reason"] is None else _text(r["finish_reason"])
            out.append(StoredMessage(message_id, _text(r["role"]), _text(r["content"]), spans, stats, finish_reason,
                                     siblings.index(message_id) + 1, len(siblings)))
        return out

    def _spans(self, message_id: int, problems: list[str]) -> list[TokenSpan]:
        """A message's spans, checked; none when one has an unknown kind (the text then shows without colours)."""
        spans: list[TokenSpan] = []
        bad = dict.fromkeys(("round", "target_prob", "draft_prob", "detail"), 0)
        rows = self._db.execute(
            "SELECT kind, text, round, target_prob, draft_prob, detail FROM spans WHERE message_id = ? ORDER BY seq",
            (message_id,),
        )
        for kind_value, text, round_, target_p, draft_p, detail_text in rows:
            kind = _KINDS.get(kind_value) if isinstance(kind_value, str) else None
            if kind is None:
                problems.append(f"a token of unknown kind {kind_value!r:.40}: its tokens are shown without colours")
                return []
            target_prob, draft_prob, detail = _probability(target_p), _probability(draft_p), _detail_of(detail_text)
            if type(round_) is not int:
                bad["round"] += 1
                round_ = -1
            bad["target_prob"] += target_prob is None and target_p is not None
            bad["draft_prob"] += draft_prob is None and draft_p is not None
            bad["detail"] += detail is None and detail_text is not None
            spans.append(TokenSpan(kind, _text(text), round_, target_prob, draft_prob, detail))
        problems += [f"{n} token{'s' if n > 1 else ''} with an unreadable {name} (left out)"
                     for name, n in bad.items() if n]
        return spans
    def truncate(self, conversation_id: int, keep: int) -> None:
        """Delete the shown path's messages after the first ``keep`` (a message withdrawn before its reply)."""
        path = self._path_ids(conversation_id)
        if keep >= len(path):
            return
        parent = path[keep - 1] if keep > 0 else None
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM messages WHERE id = ?", (path[keep],))  # its replies go with it
            self._db.execute("UPDATE conversations SET leaf_id = ?, updated = ? WHERE id = ?",
                             (parent, time.time(), conversation_id))
        remaining = self._siblings(conversation_id, parent)
        if remaining:  # show the latest other version at that place
            self.switch_version(conversation_id, remaining[-1], 0)

    # -- search ------------------------------------------------------------------------

    def search(self, text: str, mark: tuple[str, str] = ("", "")) -> list[tuple[int, str, str]]:
        """Conversations whose title or message text holds every term of ``text``, most recently updated first.

        Each as ``(conversation_id, title, snippet)``; the snippet shows the first match, each matched word
        between ``mark``'s two strings (FTS5's ``snippet()``; the whole text's match without FTS5). Any user text is
        safe: each term is matched as a quoted phrase, so FTS syntax in it (quotes, ``*``, ``NEAR``, ``-``,
        parentheses) is only text. Without FTS5 in this SQLite build, a LIKE match of the whole text.
        """
        if not text.strip():
            return []
        if self._fts5:
            query = _fts_query(text)
            if not query:
                return []
            rows = self._db.execute(
                "SELECT c.id, c.title, snippet(search, 0, ?, ?, '…', 10) FROM search"
                " JOIN conversations c ON c.id = search.conversation_id WHERE search MATCH ?"
                " ORDER BY c.updated DESC, c.id DESC, search.rowid", (*mark, query)).fetchall()
        else:
            needle = text.strip()
            pattern = _like_pattern(needle)
            rows = self._db.execute(
                "SELECT c.id, c.title, c.title AS body, -c.id AS k FROM conversations c"
                " WHERE c.title LIKE ?1 ESCAPE '\\'"
                " UNION ALL SELECT c.id, c.title, m.content, m.id FROM messages m JOIN conversations c"
                " ON c.id = m.conversation_id WHERE m.content LIKE ?1 ESCAPE '\\'", (pattern,)).fetchall()
            order = {r["id"]: i for i, r in enumerate(self._db.execute(
                "SELECT id FROM conversations ORDER BY updated DESC, id DESC"))}
            rows = [(r[0], r[1], _snippet_around(_text(r[2]), needle, mark))
                    for r in sorted(rows, key=lambda r: (order.get(r[0], 0), r[3]))]
        found: dict[int, tuple[int, str, str]] = {}
        for cid, title, snippet in rows:
            found.setdefault(cid, (cid, _text(title), " ".join(_text(snippet).split())))
        return list(found.values())

    # -- export ------------------------------------------------------------------------

    def export_json(self, conversation_id: int) -> str:
        info = self.conversation(conversation_id)
        data = {
            "title": info.title,
            "created": info.created,
            "system_prompt": info.system_prompt,
            "messages": [
                {
                    "role": m.role,
                    "content": m.content,
                    "finish_reason": m.finish_reason,
                    "stats": m.stats,
                    "spans": [s.as_dict() for s in m.spans],
                }
                for m in self.messages(conversation_id)
            ],
        }
        return json.dumps(data, indent=2, ensure_ascii=False)

    def export_markdown(self, conversation_id: int) -> str:
        info = self.conversation(conversation_id)
        parts = [f"# {info.title}", ""]
        if info.system_prompt:
            parts += ["**System**", "", info.system_prompt, ""]
        for m in self.messages(conversation_id):
            parts += [f"**{m.role.capitalize()}**", "", m.content, ""]
            figures = _figures_line(m.stats) if m.role == "assistant" and m.stats else ""
            if figures:
                parts += [f"*{figures}*", ""]
        return "\n".join(parts)


def _figures_line(stats: dict[str, Any]) -> str:
    """A reply's figures as the window shows them: "36.2 tokens/s, acceptance 95%" (what it has of those)."""
    def number(key: str) -> float | None:
        value = stats.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    tps, rate, drafted = number("tokens_per_second"), number("acceptance_rate"), number("drafted")
    parts = [f"{tps:.1f} tokens/s"] if tps else []
    if rate is not None and drafted:
        parts.append(f"acceptance {rate:.0%}")
    return ", ".join(parts)


class ReplyWriter:
    """Writes a streamed assistant reply into the store, one transaction per verified round.

    The reply's message is created with its first round, so a reply that never got a token leaves
    the conversation as it was; with ``keep`` (regenerate, edit and resend) the messages it replaces
    are deleted in that same transaction, never before. Every round also stores the figures so far,
    so a reply cut short by a crash keeps them. Pass the transcript's ``figures`` (and each round's
    spans to ``feed``) when the caller folds the events already; otherwise the writer folds them.
    """

    def __init__(self, store: ConversationStore, conversation_id: int, *, keep: int | None = None,
                 user_text: str | None = None, figures: ReplyFigures | None = None,
                 continues: int | None = None) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.keep = keep
        self.user_text = user_text
        # A continuation (``continues``: the stored reply's id) appends to that message; until its first round
        # the message stays as stored, and a continuation that ends without one leaves it so.
        self.continues = continues
        self.rounds = 0
        self.message_id: int | None = continues
        self._folds = figures is None
        self.figures = figures if figures is not None else ReplyFigures()

    @property
    def replaces(self) -> bool:
        """True when the reply replaces stored messages (regenerate, edit) rather than answering a new one."""
        return self.keep is not None

    def feed(self, event: object, spans: list[TokenSpan] | None = None) -> None:
        """Store one event; ``spans`` are a verified round's spans when the caller has them."""
        if self._folds:
            self.figures.fold([event])
        if isinstance(event, Verified):
            self.rounds += 1
            spans = spans_of(event) if spans is None else spans
            if self.message_id is None:
                self.message_id = self.store.start_reply(
                    self.conversation_id, spans, event.text, self.figures.as_dict(),
                    keep=self.keep, user_text=self.user_text,
                )
            else:
                self.store.append_spans(self.message_id, spans, event.text, self.figures.as_dict())
        elif isinstance(event, Finished):
            if self.continues is not None and not self.rounds:
                return  # a continuation that never got a token: the reply stays as it was stored
            if self.message_id is None:
                if self.replaces or event.reason is FinishReason.ERROR:
                    return  # nothing to show: the conversation stays as it was
                self.message_id = self.store.add_message(self.conversation_id, "assistant", "")
            stats = self.figures.as_dict()
            if event.message:
                stats["message"] = event.message
            self.store.finish_message(self.message_id, event.reason.value, stats)
