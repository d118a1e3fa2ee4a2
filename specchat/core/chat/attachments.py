"""Files attached to a user message: what is kept of each, how they enter the prompt, and cutting one to fit.

An :class:`Attachment` is what the store keeps and the prompt shows: the file's name and size, the text read
from it (``documents.read_document``), its token count when a model counted it, and a note when the user
accepted a cut to fit the context. The model sees each attachment as a block with its name, before the
message's own text (:func:`prompt_text`); the window shows them as chips.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .documents import PAGE_BREAK, Document, human_size

CHARS_PER_TOKEN = 4.0  # the estimate without a tokenizer (English prose and code run 3.5-4.5)


@dataclass(frozen=True)
class Attachment:
    """A file attached to a user message: its name, size on disk, text, tokens (None: not counted) and cut note."""

    name: str
    size: int
    text: str
    tokens: int | None = None
    note: str = ""  # "" for the whole file; else what was kept ("the first 38 of 120 pages")

    @classmethod
    def of(cls, document: Document, tokens: int | None = None) -> Attachment:
        return cls(document.name, document.size, document.text, tokens)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "text": self.text, "tokens": self.tokens, "note": self.note}

    @property
    def label(self) -> str:
        """The chip's words: "report.pdf · 1.2 MB · 3,400 tokens" (about, when estimated)."""
        count = self.tokens if self.tokens is not None else estimate_tokens(self.text)
        tokens = f"{'about ' if self.tokens is None else ''}{count:,} tokens"
        return " · ".join([self.name, human_size(self.size), tokens] + (["cut"] if self.note else []))


def estimate_tokens(text: str) -> int:
    """A token count without a tokenizer: about one token per four characters."""
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


def block(attachment: Attachment) -> str:
    """One attachment as the model sees it: its text between lines naming it."""
    note = f"\n[{attachment.name} was cut to fit the context: {attachment.note}]" if attachment.note else ""
    return f'<document name="{attachment.name}">\n{attachment.text.rstrip()}{note}\n</document>'


def prompt_text(text: str, attachments: Sequence[Attachment]) -> str:
    """A user message as the model reads it: each attachment's block, then the message's own text."""
    if not attachments:
        return text
    return "\n\n".join([*(block(a) for a in attachments), text])


def cut_to(attachment: Attachment, tokens: int) -> Attachment | None:
    """``attachment`` cut to about ``tokens`` tokens: whole pages when the text has page breaks, else whole lines
    (characters when a line alone is too long); None when not even a little fits. The note says what was kept."""
    if tokens <= 0:
        return None
    total = attachment.tokens if attachment.tokens is not None else estimate_tokens(attachment.text)
    if total <= tokens:
        return attachment
    chars = int(len(attachment.text) * tokens / max(total, 1))
    if chars <= 0:
        return None
    text = attachment.text
    pages = text.split(PAGE_BREAK)
    if len(pages) > 1:
        kept, used = 0, 0
        for page in pages:
            if used + len(page) + 1 > chars:
                break
            used += len(page) + 1
            kept += 1
        if kept:
            return replace(
                attachment,
                text=PAGE_BREAK.join(pages[:kept]),
                tokens=None,
                note=f"the first {kept} of {len(pages)} pages",
            )
    cut = text[:chars]
    newline = cut.rfind("\n")
    if newline > chars // 2:
        cut = cut[:newline]
    lines = text.count("\n") + 1
    kept_lines = cut.count("\n") + 1
    note = (
        f"the first {kept_lines:,} of {lines:,} lines"
        if cut.endswith("\n") or text[len(cut) : len(cut) + 1] == "\n"
        else f"the first {len(cut):,} of {len(text):,} characters"
    )
    return replace(attachment, text=cut, tokens=None, note=note)


def fit_offer(attachment: Attachment, room: int) -> str:
    """The one line the window asks before sending a document that does not fit: how big, how much fits, what to
    keep ("report.pdf is 14,000 tokens; the context has room for about 6,500: attach the first 38 pages?")."""
    total = attachment.tokens if attachment.tokens is not None else estimate_tokens(attachment.text)
    head = f"{attachment.name} is {'about ' if attachment.tokens is None else ''}{total:,} tokens"
    cut = cut_to(attachment, room)
    if cut is None:
        return f"{head}; the context has no room left for it. Remove it or start a new conversation."
    return f"{head}; the context has room for about {max(room, 0):,}: attach {cut.note}?"
