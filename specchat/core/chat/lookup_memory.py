"""Lookup memory: text from the user's saved conversations that the composite drafter's lookup also searches.

Off by default (it keeps what the user wrote and got): while off nothing is
read or written. On, it is one JSON file next to the chats
(``paths.data_dir()/lookup-memory.json``), bounded to ``max_chars``
characters (the newest text is kept), written atomically, and rebuilt from
the saved conversations when it is missing or unreadable. No Qt here: a
front end calls :meth:`LookupMemory.load` off its GUI thread and hands
:meth:`LookupMemory.texts` to ``Runtime.set_lookup_memory``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from specchat.core import paths
from specchat.core.chat.store import ConversationStore
from specchat.core.jsonfile import UnreadableFileError, read_json

log = logging.getLogger(__name__)

MEMORY_FILENAME = "lookup-memory.json"
DEFAULT_MAX_CHARS = 200_000
"""About 50,000 tokens: a lookup over it costs well under a millisecond a round."""
FORMAT_VERSION = 1


class LookupMemory:
    """A bounded list of texts, newest last, kept on disk only while ``enabled``."""

    def __init__(self, path: Path | None = None, *, enabled: bool = False, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self.path = path if path is not None else paths.data_dir() / MEMORY_FILENAME
        self.enabled = enabled
        self.max_chars = max_chars
        self._texts: list[str] = []

    @property
    def texts(self) -> list[str]:
        """The texts held, oldest first (empty while disabled)."""
        return list(self._texts) if self.enabled else []

    @property
    def size(self) -> int:
        """Characters held."""
        return sum(len(t) for t in self._texts)

    def load(self, rebuild: Callable[[], Iterable[str]]) -> bool:
        """Read the file, or rebuild from ``rebuild()`` (the saved conversations' texts) if missing or corrupt.

        Returns True when it was rebuilt. Does nothing while disabled.
        """
        if not self.enabled:
            self._texts = []
            return False
        texts = self._read()
        if texts is None:
            self._texts = []
            self._extend(rebuild())
            self.save()
            return True
        self._texts = []
        self._extend(texts)
        return False

    def add(self, text: str) -> None:
        """Remember ``text`` (a finished reply, a sent message) and save; nothing while disabled."""
        if not self.enabled or not text.strip():
            return
        self._extend([text])
        self.save()

    def disable(self, *, forget: bool = True) -> None:
        """Stop remembering; with ``forget`` delete the file too."""
        self.enabled = False
        self._texts = []
        if forget:
            self.path.unlink(missing_ok=True)

    def save(self) -> None:
        """Write the file atomically (a crash leaves the old file or the new one, never half of one)."""
        if not self.enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(
            json.dumps({"version": FORMAT_VERSION, "texts": self._texts}, ensure_ascii=False), encoding="utf-8"
        )
        os.replace(tmp, self.path)

    def _extend(self, texts: Iterable[str]) -> None:
        """Append, then drop the oldest text until the bound holds (a single text over it keeps its end)."""
        for text in texts:
            if text.strip():
                self._texts.append(text[-self.max_chars :])
        total = self.size
        drop = 0
        while total > self.max_chars and drop < len(self._texts):  # linear: one cut, not a pop(0) per text
            total -= len(self._texts[drop])
            drop += 1
        del self._texts[:drop]

    def _read(self) -> list[str] | None:
        """The stored texts, or None if the file is missing or not what this module writes."""
        try:
            data = read_json(self.path)
        except FileNotFoundError:
            return None
        except UnreadableFileError as exc:
            log.warning("lookup memory unreadable: %s; rebuilt from the saved conversations", exc)
            return None
        texts = data.get("texts") if isinstance(data, dict) and data.get("version") == FORMAT_VERSION else None
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            log.warning(
                "lookup memory %s is not a version %d list of texts; rebuilt from the saved conversations",
                self.path,
                FORMAT_VERSION,
            )
            return None
        return texts


def memory_beside(store_path: Path | str | None) -> Path:
    """Where the lookup memory of the conversations in ``store_path`` lives: next to them."""
    if store_path is None or str(store_path) == ":memory:":
        return paths.data_dir() / MEMORY_FILENAME
    return Path(store_path).with_name(MEMORY_FILENAME)


def load_beside(memory: LookupMemory, store_path: Path | str | None) -> list[str]:
    """Load ``memory`` (rebuilt from the conversations saved in ``store_path`` when its file is missing or
    corrupt) and return its texts. Opens its own connection to the store, so any one thread may call it;
    a store held only in memory has nothing saved to rebuild from.
    """

    def rebuild() -> list[str]:
        if store_path is None or str(store_path) == ":memory:" or not Path(store_path).exists():
            return []
        store = ConversationStore(store_path)
        try:
            return saved_texts(store)
        finally:
            store.close()

    memory.load(rebuild)
    return memory.texts


def saved_texts(store: ConversationStore) -> list[str]:
    """Every message's text of every saved conversation in ``store``, the least recently updated first."""
    conversations = sorted(store.conversations(), key=lambda c: c.updated)
    return [m.content for c in conversations for m in store.messages(c.id) if m.content]
