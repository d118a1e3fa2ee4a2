"""The conversation database's schema, its errors, and the migrations from every earlier version.

:func:`upgrade` brings an open connection to :data:`SCHEMA_VERSION` (tables, migrations, the FTS5 search
index and its triggers); :func:`check_version` refuses, before anything is written, a file from a newer
specchat.
"""

from __future__ import annotations

import sqlite3

from specchat.core.types import SpecchatError

from .titles import title_for

SCHEMA_VERSION = 7  # 2: messages form a tree (parent_id), a conversation shows the path to its leaf_id
#                      and has its own system prompt; 3: spans carry the token X-ray's detail;
#                      4: an FTS5 index of titles and message text (search); 5: a conversation keeps
#                      its sampler preset (conversations.sampler, JSON); 6: a conversation can be
#                      pinned to the top of the list (conversations.pinned); 7: files attached to a
#                      message (attachments: name, size, extracted text, tokens, cut note)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    leaf_id INTEGER,
    system_prompt TEXT NOT NULL DEFAULT '',
    sampler TEXT,  -- SamplerPreset.as_dict() as JSON; NULL: none kept (the controls stay as they are)
    pinned INTEGER NOT NULL DEFAULT 0  -- 1: listed at the top, under "Pinned"
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
CREATE TABLE IF NOT EXISTS attachments (
    id INTEGER PRIMARY KEY,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    name TEXT NOT NULL,
    size INTEGER NOT NULL,
    text TEXT NOT NULL,
    tokens INTEGER,  -- the target's count when one was loaded; NULL: not counted
    note TEXT NOT NULL DEFAULT ''  -- what was kept of a document cut to fit; '' for the whole file
);
CREATE INDEX IF NOT EXISTS attachments_by_message ON attachments(message_id, seq);
"""


class StoreError(SpecchatError):
    """A store operation failed; ``str(error)`` is a one-line message."""


class NewerSchemaError(StoreError):
    """The file was written by a newer specchat; it is left as it is."""


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


def _migrate_to_pins(db: sqlite3.Connection) -> None:
    """Schema 5 -> 6: conversations get a ``pinned`` column (0: none of those already stored is pinned).

    As with :func:`_migrate_to_samplers`, the version moves on in :func:`_ensure_search_index`.
    """
    with db:
        db.execute("BEGIN IMMEDIATE")
        if not any(r[1] == "pinned" for r in db.execute("PRAGMA table_info(conversations)")):
            db.execute("ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0")
            _recut_titles(db)


OLD_TITLE_CHARS = 48  # before schema 6 a title was its first message's first 48 characters, cut anywhere


def _recut_titles(db: sqlite3.Connection) -> None:
    """Titles made by the old rule and cut mid-word ("…painting by e") are cut again at a word, with "…".

    Only a title that is exactly the first 48 characters of its conversation's first message (a longer one)
    is touched: a title the user gave is left as it is.
    """
    rows = db.execute(
        "SELECT c.id, c.title, m.content FROM conversations c JOIN messages m ON m.conversation_id = c.id"
        " AND m.parent_id IS NULL AND m.role = 'user' WHERE length(c.title) = ?",
        (OLD_TITLE_CHARS,),
    ).fetchall()
    for cid, title, content in rows:
        if not isinstance(title, str) or not isinstance(content, str):
            continue
        first = content.strip().splitlines()[0] if content.strip() else ""
        if len(first) > OLD_TITLE_CHARS and first[:OLD_TITLE_CHARS] == title:
            db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title_for(first, OLD_TITLE_CHARS), cid))


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
                db.execute(
                    "INSERT INTO search (rowid, text, conversation_id)"
                    " SELECT id, content, conversation_id FROM messages"
                )
                for name, body in _SEARCH_TRIGGERS.items():
                    db.execute(f"CREATE TRIGGER IF NOT EXISTS {name} {body}")
        db.execute("UPDATE schema_version SET version = ? WHERE version < ?", (SCHEMA_VERSION, SCHEMA_VERSION))


def check_version(db: sqlite3.Connection) -> None:
    """Raise NewerSchemaError when the file was written by a newer specchat (read before anything is written)."""
    has_version = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone()
    if has_version:
        row = db.execute("SELECT max(version) FROM schema_version").fetchone()
        version = row[0]
        if version is not None and (not isinstance(version, int) or version > SCHEMA_VERSION):
            raise NewerSchemaError(
                f"was written by a newer specchat (schema version {version!r}; this one reads up to {SCHEMA_VERSION})"
            )


def upgrade(db: sqlite3.Connection) -> bool:
    """Create what is missing and migrate an older file to :data:`SCHEMA_VERSION`; True when FTS5 is there.

    Schema 6 -> 7 is the ``attachments`` table, which the script below creates in an older file (its messages
    have none); the version moves on in :func:`_ensure_search_index`.
    """
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
        if row[0] < 6:
            _migrate_to_pins(db)
    fts5 = _has_fts5(db)
    _ensure_search_index(db, fts5)  # schema 3 -> 4, and a new file's index
    db.execute("CREATE INDEX IF NOT EXISTS messages_by_parent ON messages(parent_id)")
    return fts5
