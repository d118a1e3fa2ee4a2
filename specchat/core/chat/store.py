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

This module is the store's front door; each job has its own module:

- ``store_schema``: the schema, its version, the migrations and the search index
- ``store_opening``: opening the file, the lock, setting an unreadable file aside
- ``store_codec``: rows to records and back (spans, X-ray details, figures), checked on reading
- ``store_tree``: :class:`ConversationStore`, conversations as a tree of message versions
- ``store_search``: FTS5 search, with a LIKE fallback
- ``store_export``: a conversation as JSON or Markdown
- ``store_writer``: :class:`ReplyWriter`, a reply written as it streams
"""

from __future__ import annotations

from .store_codec import ConversationInfo, StoredMessage
from .store_schema import SCHEMA_VERSION, NewerSchemaError, StoreError
from .store_tree import DB_FILENAME, ConversationStore
from .store_writer import ReplyWriter
from .transcript import TokenSpan, spans_of

__all__ = [
    "DB_FILENAME",
    "SCHEMA_VERSION",
    "ConversationInfo",
    "ConversationStore",
    "NewerSchemaError",
    "ReplyWriter",
    "StoreError",
    "StoredMessage",
    "TokenSpan",
    "spans_of",
]
