"""Search over conversation titles and message text: FTS5 when this SQLite has it, else a LIKE match.

The FTS5 index itself (a row per message and per title, kept in step by
triggers) is part of the schema (store_schema.py); this module only queries it.
"""

from __future__ import annotations

import sqlite3

from .store_codec import text_of


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
        text = text[:at] + mark[0] + text[at : at + len(needle)] + mark[1] + text[at + len(needle) :]
        end += len(mark[0]) + len(mark[1])
    piece = " ".join(text[start:end].split())
    return ("…" if start else "") + piece + ("…" if end < len(text) else "")


def search(
    db: sqlite3.Connection, fts5: bool, text: str, mark: tuple[str, str] = ("", "")
) -> list[tuple[int, str, str]]:
    """Conversations whose title or message text holds every term of ``text``, most recently updated first.

    Each as ``(conversation_id, title, snippet)``; the snippet shows the first match, each matched word
    between ``mark``'s two strings (FTS5's ``snippet()``; the whole text's match without FTS5). Any user text is
    safe: each term is matched as a quoted phrase, so FTS syntax in it (quotes, ``*``, ``NEAR``, ``-``,
    parentheses) is only text. Without FTS5 in this SQLite build, a LIKE match of the whole text.
    """
    if not text.strip():
        return []
    if fts5:
        query = _fts_query(text)
        if not query:
            return []
        rows = db.execute(
            "SELECT c.id, c.title, snippet(search, 0, ?, ?, '…', 10) FROM search"
            " JOIN conversations c ON c.id = search.conversation_id WHERE search MATCH ?"
            " ORDER BY c.updated DESC, c.id DESC, search.rowid",
            (*mark, query),
        ).fetchall()
    else:
        needle = text.strip()
        pattern = _like_pattern(needle)
        rows = db.execute(
            "SELECT c.id, c.title, c.title AS body, -c.id AS k FROM conversations c"
            " WHERE c.title LIKE ?1 ESCAPE '\\'"
            " UNION ALL SELECT c.id, c.title, m.content, m.id FROM messages m JOIN conversations c"
            " ON c.id = m.conversation_id WHERE m.content LIKE ?1 ESCAPE '\\'",
            (pattern,),
        ).fetchall()
        order = {
            r["id"]: i for i, r in enumerate(db.execute("SELECT id FROM conversations ORDER BY updated DESC, id DESC"))
        }
        rows = [
            (r[0], r[1], _snippet_around(text_of(r[2]), needle, mark))
            for r in sorted(rows, key=lambda r: (order.get(r[0], 0), r[3]))
        ]
    found: dict[int, tuple[int, str, str]] = {}
    for cid, title, snippet in rows:
        found.setdefault(cid, (cid, text_of(title), " ".join(text_of(snippet).split())))
    return list(found.values())
