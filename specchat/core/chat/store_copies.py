"""Copies of a stored conversation: a whole duplicate, or a branch of its shown path up to one message."""

from __future__ import annotations

import sqlite3
import time

from .store_codec import inserted_id
from .store_schema import StoreError


def copy_conversation(db: sqlite3.Connection, conversation_id: int, only: list[int] | None, suffix: str) -> int:
    """Copy a conversation (within the caller's transaction) and return the new one's id.

    With ``only`` (message ids, a path from the first message) just those messages are copied, the last one
    the copy's leaf; without it every message and version is, and the copy shows the path the original shows.
    Messages keep their text, figures, spans, attached files and times; the copy is new (created and updated
    now), unpinned, with the original's system prompt and sampler and its title plus ``suffix``.
    """
    row = db.execute(
        "SELECT title, system_prompt, sampler, leaf_id FROM conversations WHERE id = ?", (conversation_id,)
    ).fetchone()
    if row is None:
        raise StoreError(f"no conversation with id {conversation_id}")
    now = time.time()
    copy = inserted_id(
        db.execute(
            "INSERT INTO conversations (title, created, updated, system_prompt, sampler) VALUES (?, ?, ?, ?, ?)",
            (f"{row[0]}{suffix}", now, now, row[1], row[2]),
        )
    )
    if only is None:
        ids = [
            r[0]
            for r in db.execute("SELECT id FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,))
        ]
    else:
        ids = list(only)
    new_ids: dict[int, int] = {}
    for old in ids:  # a parent is stored before its children: its new id is known when they are copied
        parent = db.execute("SELECT parent_id FROM messages WHERE id = ?", (old,)).fetchone()[0]
        new_ids[old] = inserted_id(
            db.execute(
                "INSERT INTO messages (conversation_id, parent_id, position, role, content, finish_reason, stats,"
                " created) SELECT ?, ?, position, role, content, finish_reason, stats, created"
                " FROM messages WHERE id = ?",
                (copy, new_ids.get(parent), old),
            )
        )
        db.execute(
            "INSERT INTO spans (message_id, seq, kind, text, round, target_prob, draft_prob, detail)"
            " SELECT ?, seq, kind, text, round, target_prob, draft_prob, detail FROM spans WHERE message_id = ?",
            (new_ids[old], old),
        )
        db.execute(
            "INSERT INTO attachments (message_id, seq, name, size, text, tokens, note)"
            " SELECT ?, seq, name, size, text, tokens, note FROM attachments WHERE message_id = ?",
            (new_ids[old], old),
        )
    leaf = ids[-1] if only is not None and ids else row[3]
    db.execute("UPDATE conversations SET leaf_id = ? WHERE id = ?", (new_ids.get(leaf), copy))
    return copy
