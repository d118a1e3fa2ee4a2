"""A conversation's title from its first message, and the file name an export suggests for it."""

from __future__ import annotations

import re

ELLIPSIS = "\u2026"


def cut_at_word(text: str, limit: int) -> str:
    """``text`` on one line, cut to at most ``limit`` characters at a word boundary, "…" marking a cut.

    A single word longer than ``limit`` is cut inside it (there is no boundary to cut at).
    """
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = text[: limit - 1]  # room for the ellipsis
    if text[limit - 1] != " " and " " in head:
        head = head[: head.rindex(" ")]
    return head.rstrip(" ,;:.-") + ELLIPSIS


def title_for(message: str, limit: int) -> str:
    """A new conversation's title: the first line of its first message, cut at a word boundary."""
    lines = [line for line in message.splitlines() if line.strip()]
    return cut_at_word(lines[0] if lines else "", limit) or "New conversation"


def export_filename(title: str, extension: str, limit: int = 60) -> str:
    """A clean file name for a conversation's export: its title's words (no cut word, no ellipsis), ``.ext``.

    Characters a file system may refuse become spaces; runs of spaces and underscores become one.
    """
    words = re.sub(r"[^\w\- ]+", " ", title.replace(ELLIPSIS, " "), flags=re.UNICODE)
    stem = cut_at_word(words, limit).removesuffix(ELLIPSIS).strip(" -_.")
    stem = re.sub(r"[ _]+", " ", stem).strip() or "conversation"
    return f"{stem}.{extension}"
