"""The reading view: each reply as rendered Markdown with a light touch of the token fates.

Accepted drafts are tinted, rejections are small markers whose tooltip or click
shows the draft's guess (markdown_render.py). While a reply streams only its
last top-level block is drawn again on each flush (``markdown_render.Tail``),
so the GUI never lays out the whole reply per token; the pending draft shows as
a ghost after the text until its verdict.
"""

from __future__ import annotations

from PySide6.QtGui import QTextBlockFormat, QTextCursor

from specchat.core.chat.transcript import Message, span_count
from specchat.core.types import Drafted, Finished, TokenKind, Verified

from .chat_page import Page, Renderer, StreamEvent
from .markdown_blocks import FateIndex, parse_blocks
from .markdown_render import BodyWriter, Tail, new_block, remove_range
from .token_styles import PROP_CHROME, PROP_MESSAGE, kind_format, shown_round


class ReadingRenderer(Renderer):
    """Draws replies as Markdown; keeps the streaming reply's last block and ghost to draw on from."""

    def __init__(self, page: Page) -> None:
        super().__init__(page)
        self._fates = FateIndex()
        self._tail = Tail(0, 0)  # the last top-level block, in the source and in the document
        self._text_end: int | None = None  # where the reply's text ends (None: it has none yet)
        self._ghost: tuple[int, int] | None = None  # the pending draft drawn: start and length

    def _writer(self, index: int, fates: FateIndex) -> BodyWriter:
        page = self.page
        return BodyWriter(page.palette(), page.mono, index, fates, not page.hide_rejected, page.body_start)

    def insert_reply(self, cursor: QTextCursor, index: int) -> None:
        drew = self._insert_body(cursor, index)
        self.page.insert_note(cursor, index, own_line=not drew or cursor.block().length() <= 1)

    def _insert_body(self, cursor: QTextCursor, index: int) -> bool:
        """Draw a reply's Markdown; True if it drew any text."""
        page = self.page
        msg = page.transcript.messages[index]
        page.body_start = cursor.position()
        fates = FateIndex(msg.spans or [])
        blocks = parse_blocks(msg.content)
        writer = self._writer(index, fates)
        tail = writer.write(cursor, blocks, 0)
        if msg is page.live or (msg.role == "assistant" and not msg.finished):
            self._fates = fates
            self._tail = tail
            self._text_end = writer.text_end
            self._ghost = None
        return writer.text_end is not None

    def flush(self, events: list[StreamEvent], msg: Message, index: int) -> None:
        page = self.page
        changed = finished = False
        for event in events:
            if isinstance(event, Drafted):
                page.pending = event
            elif isinstance(event, Verified):
                page.pending = None
                page.seen += span_count(event)
                changed = True
            elif isinstance(event, Finished):
                page.pending = None
                finished = True
                break
        page.drawn = max(page.drawn, page.seen)
        cursor = page.end_cursor()
        cursor.beginEditBlock()
        self._remove_ghost(cursor)
        if changed or finished:
            self._render_tail(cursor, msg, index, final=finished)
        if finished:
            page.live = None
            end = page.end_cursor()
            page.insert_note(end, index, own_line=self._text_end is None or end.block().length() <= 1)
        else:
            self.insert_pending(cursor, index)
        cursor.endEditBlock()

    def _render_tail(self, cursor: QTextCursor, msg: Message, index: int, final: bool) -> None:
        """Draw the streaming reply again from its tail (see ``markdown_render.Tail``) on; ``final`` at its end."""
        self._fates.update(msg.spans or [])
        blocks = parse_blocks(msg.content[self._tail.src :], self._tail.src)
        writer = self._writer(index, self._fates)
        self._tail = writer.write_tail(cursor, blocks, self._tail, final)
        self._text_end = writer.text_end

    def insert_pending(self, cursor: QTextCursor, index: int) -> None:
        """The pending draft as a ghost after the reply's text."""
        pending = self.page.pending
        if pending is None or not pending.pieces:
            return
        text = "".join(pending.pieces)
        if self._text_end is not None:
            cursor.setPosition(self._text_end)
            self._ghost = (self._text_end, len(text))
        else:  # the reply has no text yet: the ghost gets a line of its own, removed with it
            cursor.movePosition(QTextCursor.MoveOperation.End)
            self._ghost = (cursor.position(), len(text) + 1)
            new_block(cursor, QTextBlockFormat())
        fmt = kind_format(TokenKind.PENDING, self.page.palette())
        fmt.setProperty(PROP_MESSAGE, index)
        fmt.setProperty(PROP_CHROME, True)
        fmt.setToolTip(f"pending draft · round {shown_round(pending.round)}")
        cursor.insertText(text, fmt)

    def _remove_ghost(self, cursor: QTextCursor) -> None:
        if self._ghost is None:
            return
        start, length = self._ghost
        remove_range(cursor, start, start + length)
        self._ghost = None

    def forget_pending(self) -> None:
        self._ghost = None
