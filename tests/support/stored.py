"""Conversations written to a real SQLite file, and raw SQL to poison them with, for the read-back tests."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from specchat.core.chat.store import ConversationStore
from specchat.core.chat.transcript import TokenSpan
from specchat.core.types import TokenKind


def stored_reply(path: Path, spans: list[TokenSpan], stats: dict[str, object] | None = None) -> int:
    """A conversation in ``path``: a question and a reply of ``spans``; its id."""
    store = ConversationStore(path)
    cid = store.create_conversation("poisoned")
    store.add_message(cid, "user", "Say something.")
    text = "".join(s.text for s in spans if s.kind is not TokenKind.REJECTED)
    store.start_reply(cid, spans, text, stats or {"passes": 1})
    store.close()
    return cid


def poke(path: Path, sql: str, *args: object) -> None:
    """Run one statement on the file behind the store's back."""
    db = sqlite3.connect(path)
    db.execute(sql, args)
    db.commit()
    db.close()
