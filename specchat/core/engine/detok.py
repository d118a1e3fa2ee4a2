"""Incremental, UTF-8-safe detokenization.

Tokens carry bytes, and a multi-byte character is often split across two or
three tokens. The detokenizer holds back an incomplete tail until the
character completes, so no event ever carries half a character.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable


class Detokenizer:
    """Feeds token bytes through an incremental UTF-8 decoder."""

    def __init__(self, piece: Callable[[int], bytes]) -> None:
        self._piece = piece
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        """Text that became complete with this token (may be empty)."""
        return self._decoder.decode(self._piece(token))

    def flush(self) -> str:
        """Whatever is held back, with invalid bytes replaced (end of reply)."""
        return self._decoder.decode(b"", final=True)

    def fork(self) -> Detokenizer:
        """An independent copy with the same held-back bytes (for speculative pieces)."""
        clone = Detokenizer(self._piece)
        clone._decoder.setstate(self._decoder.getstate())
        return clone
