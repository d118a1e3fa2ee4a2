"""Conversations as a tree of message versions in one SQLite file: create, read, branch, trim.

A conversation shows one path through its messages, from the first to its
``leaf_id``; regenerating or editing adds a sibling (a new version) rather than
overwriting, and :meth:`ConversationStore.switch_version` flips between them.
Opening (store_opening.py), the row codec (store_codec.py), search
(store_search.py) and export (store_export.py) are the class's helpers.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from specchat.core import paths
from specchat.core.jsonfile import UnreadableFileError, parse_json

from . import store_copies, store_export, store_search
from .attachments import Attachment
from .presets import SamplerPreset, preset_of
from .store_codec import (
    ConversationInfo,
    StoredMessage,
    attachment_rows,
    attachments_of_rows,
    inserted_id,
    span_rows,
    spans_of_rows,
    stats_of,
    text_of,
)
from .store_opening import open_database
from .store_schema import StoreError
from .transcript import TokenSpan

log = logging.getLogger(__name__)

DB_FILENAME = "conversations.sqlite3"


class ConversationStore:
    """Conversations in one SQLite file. Use from one thread."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path else paths.data_dir() / DB_FILENAME
        opened = open_database(self.path)
        self._db, self._fts5 = opened.db, opened.fts5
        self.notice = opened.notice  # one-line message when the file was set aside or left alone

    def close(self) -> None:
        self._db.close()

    # -- conversations ---------------------------------------------------------------

    def create_conversation(self, title: str = "New conversation", system_prompt: str = "") -> int:
        now = time.time()
        cur = self._db.execute(
            "INSERT INTO conversations (title, created, updated, system_prompt) VALUES (?, ?, ?, ?)",
            (title, now, now, system_prompt),
        )
        return inserted_id(cur)

    def set_system_prompt(self, conversation_id: int, system_prompt: str) -> None:
        self._db.execute("UPDATE conversations SET system_prompt = ? WHERE id = ?", (system_prompt, conversation_id))

    def set_sampler(self, conversation_id: int, preset: SamplerPreset) -> None:
        """Keep ``preset`` (the sampler in use) with the conversation; it comes back when it is opened."""
        self._db.execute(
            "UPDATE conversations SET sampler = ? WHERE id = ?",
            (json.dumps(preset.as_dict(), ensure_ascii=False), conversation_id),
        )

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

    _INFO = "SELECT id, title, created, updated, system_prompt, pinned FROM conversations"

    @staticmethod
    def _info(r: sqlite3.Row) -> ConversationInfo:
        return ConversationInfo(r["id"], r["title"], r["created"], r["updated"], r["system_prompt"], bool(r["pinned"]))

    def conversations(self) -> list[ConversationInfo]:
        """All conversations, the pinned ones first, each part most recently updated first."""
        rows = self._db.execute(f"{self._INFO} ORDER BY pinned != 0 DESC, updated DESC, id DESC")
        return [self._info(r) for r in rows]

    def conversation(self, conversation_id: int) -> ConversationInfo:
        r = self._db.execute(f"{self._INFO} WHERE id = ?", (conversation_id,)).fetchone()
        if r is None:
            raise StoreError(f"no conversation with id {conversation_id}")
        return self._info(r)

    def set_pinned(self, conversation_id: int, pinned: bool) -> None:
        """Pin a conversation to the top of the list, or unpin it (its place then follows its last change)."""
        self._db.execute("UPDATE conversations SET pinned = ? WHERE id = ?", (int(pinned), conversation_id))

    def duplicate(self, conversation_id: int) -> int:
        """A copy of the conversation with every version of every message; returns the copy's id."""
        with self._db:
            self._db.execute("BEGIN")
            return store_copies.copy_conversation(self._db, conversation_id, None, " (copy)")

    def branch(self, conversation_id: int, message_id: int) -> int:
        """A new conversation with the shown path up to and including ``message_id``; returns its id."""
        path = self._path_ids(conversation_id)
        if message_id not in path:
            raise StoreError(f"message {message_id} is not on conversation {conversation_id}'s shown path")
        with self._db:
            self._db.execute("BEGIN")
            return store_copies.copy_conversation(
                self._db, conversation_id, path[: path.index(message_id) + 1], " (branch)"
            )

    def rename(self, conversation_id: int, title: str) -> None:
        self._db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def delete(self, conversation_id: int) -> None:
        self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # -- messages ----------------------------------------------------------------------

    def add_message(self, conversation_id: int, role: str, content: str, attachments: Sequence[Attachment] = ()) -> int:
        """Append a message (with the files attached to it) after the conversation's shown path."""
        with self._db:
            self._db.execute("BEGIN")
            return self._insert_message(conversation_id, role, content, self._leaf(conversation_id), attachments)

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
            self._warn(
                f"{self.path}: conversation {conversation_id}: its messages' parents form a loop; "
                f"message {ids[0]} now starts it"
            )
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

    def _insert_message(
        self,
        conversation_id: int,
        role: str,
        content: str,
        parent: int | None,
        attachments: Sequence[Attachment] = (),
    ) -> int:
        row = self._db.execute("SELECT position FROM messages WHERE id = ?", (parent,)).fetchone() if parent else None
        cur = self._db.execute(
            "INSERT INTO messages (conversation_id, parent_id, position, role, content, created)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (conversation_id, parent, row[0] + 1 if row else 0, role, content, time.time()),
        )
        message_id = inserted_id(cur)
        if attachments:
            self._db.executemany(
                "INSERT INTO attachments (message_id, seq, name, size, text, tokens, note)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                attachment_rows(message_id, attachments),
            )
        self._db.execute(
            "UPDATE conversations SET leaf_id = ?, updated = ? WHERE id = ?", (message_id, time.time(), conversation_id)
        )
        return message_id

    def append_spans(
        self, message_id: int, spans: Iterable[TokenSpan], text: str, stats: dict[str, Any] | None = None
    ) -> None:
        """Add one round's spans and ``text`` (and the figures so far) to a streamed message, in one transaction."""
        with self._db:
            self._db.execute("BEGIN")
            self._append_spans(message_id, spans, text, stats)

    def _append_spans(
        self, message_id: int, spans: Iterable[TokenSpan], text: str, stats: dict[str, Any] | None
    ) -> None:
        start = self._db.execute(
            "SELECT coalesce(max(seq), -1) + 1 FROM spans WHERE message_id = ?", (message_id,)
        ).fetchone()[0]
        self._db.executemany(
            "INSERT INTO spans (message_id, seq, kind, text, round, target_prob, draft_prob, detail)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            span_rows(message_id, start, spans),
        )
        self._db.execute(
            "UPDATE messages SET content = content || ?, stats = coalesce(?, stats) WHERE id = ?",
            (text, json.dumps(stats) if stats is not None else None, message_id),
        )

    def start_reply(
        self,
        conversation_id: int,
        spans: Iterable[TokenSpan],
        text: str,
        stats: dict[str, Any],
        *,
        keep: int | None = None,
        user_text: str | None = None,
        user_attachments: Sequence[Attachment] = (),
    ) -> int:
        """Store a reply's first round as a new assistant message, in one transaction.

        With ``keep`` (regenerate, edit and resend) the reply (after ``user_text``, an edited message, with its
        ``user_attachments``) becomes a new version after the first ``keep`` messages of the shown path; the
        earlier version stays stored as a branch the conversation can flip back to.
        """
        with self._db:
            self._db.execute("BEGIN")
            if keep is None:
                parent = self._leaf(conversation_id)
            else:
                path = self._path_ids(conversation_id)
                parent = path[keep - 1] if 0 < keep <= len(path) else None
            if user_text is not None:
                parent = self._insert_message(conversation_id, "user", user_text, parent, user_attachments)
            message_id = self._insert_message(conversation_id, "assistant", "", parent)
            self._append_spans(message_id, spans, text, stats)
        return message_id

    def switch_version(self, conversation_id: int, message_id: int, step: int) -> bool:
        """Show the previous (-1) or next (+1) version at a message's place, with the latest path below it."""
        with self._db:
            self._db.execute("BEGIN")
            row = self._db.execute(
                "SELECT parent_id FROM messages WHERE id = ? AND conversation_id = ?", (message_id, conversation_id)
            ).fetchone()
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
        self._db.execute(
            "UPDATE messages SET stats = json_set(coalesce(stats, '{}'), ?, json(?)) WHERE id = ?",
            (f"$.{key}", json.dumps(value), message_id),
        )

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
            attachments = self.attachments(message_id, problems)
            stats = stats_of(r["stats"], problems)
            if problems:
                self._warn(f"{self.path}: message {message_id} does not read back whole: {'; '.join(problems)}")
            finish_reason = None if r["finish_reason"] is None else text_of(r["finish_reason"])
            out.append(
                StoredMessage(
                    message_id,
                    text_of(r["role"]),
                    text_of(r["content"]),
                    spans,
                    stats,
                    finish_reason,
                    siblings.index(message_id) + 1,
                    len(siblings),
                    attachments,
                )
            )
        return out

    def _spans(self, message_id: int, problems: list[str]) -> list[TokenSpan]:
        """A message's spans, checked; none when one has an unknown kind (the text then shows without colours)."""
        rows = self._db.execute(
            "SELECT kind, text, round, target_prob, draft_prob, detail FROM spans WHERE message_id = ? ORDER BY seq",
            (message_id,),
        )
        return spans_of_rows(rows, problems)

    def attachments(self, message_id: int, problems: list[str] | None = None) -> list[Attachment]:
        """The files attached to a message, in the order they were attached."""
        rows = self._db.execute(
            "SELECT name, size, text, tokens, note FROM attachments WHERE message_id = ? ORDER BY seq", (message_id,)
        )
        return attachments_of_rows(rows, problems if problems is not None else [])

    def truncate(self, conversation_id: int, keep: int) -> None:
        """Delete the shown path's messages after the first ``keep`` (a message withdrawn before its reply)."""
        path = self._path_ids(conversation_id)
        if keep >= len(path):
            return
        parent = path[keep - 1] if keep > 0 else None
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM messages WHERE id = ?", (path[keep],))  # its replies go with it
            self._db.execute(
                "UPDATE conversations SET leaf_id = ?, updated = ? WHERE id = ?", (parent, time.time(), conversation_id)
            )
        remaining = self._siblings(conversation_id, parent)
        if remaining:  # show the latest other version at that place
            self.switch_version(conversation_id, remaining[-1], 0)

    # -- search ------------------------------------------------------------------------

    def search(self, text: str, mark: tuple[str, str] = ("", "")) -> list[tuple[int, str, str]]:
        """Conversations whose title or message text holds every term of ``text`` (see store_search.search)."""
        return store_search.search(self._db, self._fts5, text, mark)

    # -- export ------------------------------------------------------------------------

    def export_json(self, conversation_id: int) -> str:
        info = self.conversation(conversation_id)
        return store_export.as_json(info, self.messages(conversation_id))

    def export_markdown(self, conversation_id: int) -> str:
        info = self.conversation(conversation_id)
        return store_export.as_markdown(info, self.messages(conversation_id))
