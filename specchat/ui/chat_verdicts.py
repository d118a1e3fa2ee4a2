"""The verdict view: each reply's raw text with every token's fate inline in the strong styles.

Rejected drafts are struck through (or hidden); the pending draft shows after
the text until its verdict. Text inside ``` fences gets the monospace font once
the reply is finished (the reply is then drawn again whole).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from PySide6.QtGui import QTextBlockFormat, QTextCursor

from specchat.core.chat.transcript import Message, TokenSpan, span_count
from specchat.core.types import Drafted, Finished, TokenKind, Verified

from .chat_page import Page, Renderer, StreamEvent
from .token_styles import PROP_CHROME, PROP_MESSAGE, kind_format, reading_format, shown_round, span_format

_FENCE = re.compile(r"```[^\n]*\n.*?(?:```|\Z)", re.DOTALL)


@dataclass
class _Segment:
    text: str
    span: TokenSpan | None
    code: bool = False


def _code_ranges(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _FENCE.finditer(text)]


def _segments(msg: Message) -> Iterator[_Segment]:
    """The verdict view's runs of a message, marking those inside ``` fences once the message is finished."""
    if msg.spans is None:
        yield _Segment(msg.text, None)
        return
    ranges = _code_ranges(msg.content) if msg.finished else []
    offset = 0
    for span in msg.spans:
        committed = span.kind is not TokenKind.REJECTED
        if not ranges:
            yield _Segment(span.text, span)
            continue
        if not committed:
            inside = any(a <= offset < b for a, b in ranges)
            yield _Segment(span.text, span, inside)
            continue
        start = 0
        while start < len(span.text):
            pos = offset + start
            inside = any(a <= pos < b for a, b in ranges)
            bounds = [b for a, b in ranges if a <= pos < b] if inside else [a for a, _ in ranges if a > pos]
            end = min([len(span.text)] + [x - offset for x in bounds])
            yield _Segment(span.text[start:end], span, inside)
            start = end
        offset += len(span.text)


class VerdictRenderer(Renderer):
    """Draws replies span by span; appends each verified round's spans as it arrives."""

    def __init__(self, page: Page) -> None:
        super().__init__(page)
        self._pending_start: int | None = None  # where the pending draft is drawn (it runs to the end)

    def insert_reply(self, cursor: QTextCursor, index: int) -> None:
        cursor.insertBlock(QTextBlockFormat())
        self.page.body_start = self.page.reply_start = cursor.position()
        self._insert_body(cursor, index)

    def flush(self, events: list[StreamEvent], msg: Message, index: int) -> None:
        page = self.page
        spans = msg.spans or []
        cursor = page.end_cursor()
        cursor.beginEditBlock()
        for i, event in enumerate(events):
            if isinstance(event, Drafted):
                self._remove_pending(cursor)
                page.pending = event
                later = events[i + 1] if i + 1 < len(events) else None
                if not (isinstance(later, Verified) and later.round == event.round):
                    self.insert_pending(cursor, index)
            elif isinstance(event, Verified):
                self._remove_pending(cursor)
                page.pending = None
                page.seen += span_count(event)
                for span in spans[page.drawn : page.seen]:
                    self._insert_segment(cursor, _Segment(span.text, span), index)
                page.drawn = max(page.drawn, page.seen)
            elif isinstance(event, Finished):
                self._remove_pending(cursor)
                page.pending = None
                page.live = None
                if _code_ranges(msg.content):
                    cursor.setPosition(page.reply_start)
                    cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
                    cursor.removeSelectedText()
                    self._insert_body(cursor, index)
                else:
                    page.insert_note(cursor, index)
                break
        cursor.endEditBlock()

    def _insert_body(self, cursor: QTextCursor, index: int) -> None:
        for seg in _segments(self.page.transcript.messages[index]):
            self._insert_segment(cursor, seg, index)
        self.page.insert_note(cursor, index)

    def _shown(self, seg: _Segment) -> bool:
        return not (self.page.hide_rejected and seg.span is not None and seg.span.kind is TokenKind.REJECTED)

    def _insert_segment(self, cursor: QTextCursor, seg: _Segment, index: int) -> None:
        if not seg.text or not self._shown(seg):
            return
        if seg.span is None:
            fmt = reading_format(None, self.page.palette(), index)
        else:
            fmt = span_format(seg.span, self.page.palette(), index)
        if seg.code:
            fmt.setFontFamilies(self.page.mono.families())
        cursor.insertText(seg.text, fmt)

    def insert_pending(self, cursor: QTextCursor, index: int) -> None:
        """The pending draft after the spans drawn so far."""
        pending = self.page.pending
        if pending is None or not pending.pieces:
            return
        self._pending_start = cursor.position()
        fmt = kind_format(TokenKind.PENDING, self.page.palette())
        fmt.setProperty(PROP_MESSAGE, index)
        fmt.setProperty(PROP_CHROME, True)
        fmt.setToolTip(f"pending draft · round {shown_round(pending.round)}")
        cursor.insertText("".join(pending.pieces), fmt)

    def _remove_pending(self, cursor: QTextCursor) -> None:
        if self._pending_start is None:
            return
        cursor.setPosition(self._pending_start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        self._pending_start = None

    def forget_pending(self) -> None:
        self._pending_start = None
