"""The conversation view: replies as rendered Markdown with their token fates, or the raw verdict view.

The view draws a ``Transcript`` (core/chat/transcript.py) that the window owns
and folds engine events into; the view never changes it. Events are queued by
``feed`` and drawn on a ~30 ms timer inside one edit block.

Two looks. The reading view (the default) renders each reply as Markdown
(markdown_render.py) with a light touch of the fates: accepted drafts tinted,
rejections as small markers whose tooltip or click shows the draft's guess.
While a reply streams only its last top-level block is drawn again on each
flush, so the GUI never lays out the whole reply per token. The verdict view
(``set_show_verdicts``) shows the raw text with every fate inline in the
strong styles, rejected drafts struck through. Switching looks, hiding
rejections or a palette change redraws from the transcript.

The view follows a streaming reply unless the user scrolls up; a "jump to
latest" button then floats over the bottom-right corner.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from PySide6.QtCore import QEvent, QPoint, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QAction,
    QContextMenuEvent,
    QCursor,
    QDesktopServices,
    QFont,
    QFontDatabase,
    QGuiApplication,
    QHelpEvent,
    QKeyEvent,
    QKeySequence,
    QMouseEvent,
    QPalette,
    QResizeEvent,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
)
from PySide6.QtWidgets import QLabel, QMenu, QTextBrowser, QToolButton, QToolTip, QWidget

from specchat.core.chat.race import RaceRecord, race_refusal
from specchat.core.chat.transcript import Message, TokenSpan, Transcript, span_count
from specchat.core.types import Drafted, Finished, TokenKind, Verified

from . import syntax
from .hover_bar import HoverBar, header_bottom_of
from .markdown_blocks import FateIndex, fence_code, parse_blocks
from .markdown_render import BodyWriter, Tail, new_block, remove_range
from .token_styles import (
    PROP_CHROME,
    PROP_CODE,
    PROP_MESSAGE,
    PROP_POSITION,
    PROP_ROUND,
    kind_format,
    legend_html,
    reading_format,
    rejection_tooltip,
    span_format,
)
from .token_xray import TokenXray

FLUSH_MS = 30
WARM_UP_MS = 300
FOLLOW_SLACK = 4  # pixels from the bottom that still count as "at the bottom"
_FENCE = re.compile(r"```[^\n]*\n.*?(?:```|\Z)", re.DOTALL)

_NOTES = {
    "cancelled": "stopped",
    "context_full": "stopped: the context is full",
    "error": "stopped by an error",
    None: "stopped: the app closed",
}


def finish_note(msg: Message) -> str:
    """The mark shown after a reply that did not end on its own ("" for a complete one)."""
    if msg.role != "assistant" or not msg.finished:
        return ""
    if msg.finish_reason == "max_tokens":
        limit = msg.figures.max_tokens if msg.figures is not None else 0
        return f"stopped at the {limit}-token limit" if limit else "stopped at the token limit"
    return _NOTES.get(msg.finish_reason, "")


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


def clean_text(document: QTextDocument, start: int, end: int) -> str:
    """The document's text between two positions without the view's own marks (markers, labels, ghosts)."""
    lines: list[str] = []
    block = document.findBlock(start)
    while block.isValid() and block.position() <= end:
        parts: list[str] = []
        chrome_only = False
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            a, b = max(start, frag.position()), min(end, frag.position() + frag.length())
            if frag.charFormat().property(PROP_CHROME):
                chrome_only = chrome_only or not parts
            elif a < b:
                parts.append(frag.text()[a - frag.position():b - frag.position()])
                chrome_only = False
            it += 1
        if not (chrome_only and not parts):
            lines.append("".join(parts))
        block = block.next()
    return "\n".join(lines).replace("\u2028", "\n").replace("\u00a0", " ")


class ChatView(QTextBrowser):
    """Read-only view of a conversation with live speculative-decoding highlighting."""

    regenerate_requested = Signal()
    edit_requested = Signal(int)  # index of the user message to edit and resend
    version_requested = Signal(int, int)  # index of a message with versions, and -1 or +1
    race_requested = Signal(int)  # index of a reply to race against plain decoding (or to replay its race)
    continue_requested = Signal()  # go on with the last reply, cut at the token limit
    verdicts_changed = Signal(bool)

    def __init__(self, parent: QWidget | None = None, transcript: Transcript | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setOpenLinks(False)
        self.setUndoRedoEnabled(False)
        self.document().setDocumentMargin(10)
        self.document().setIndentWidth(22)
        self.transcript = transcript if transcript is not None else Transcript()
        self._verdicts = False
        self._hide_rejected = False
        self._queue: list[Drafted | Verified | Finished] = []
        self._live: Message | None = None  # the reply being drawn as it streams
        self._seen = 0  # spans of the live reply that the queued events drawn so far account for
        self._pending: Drafted | None = None
        # verdict view: spans drawn, where the pending ghost and the reply's text begin
        self._drawn = 0
        self._pending_start: int | None = None
        self._reply_start = 0
        # reading view: where the body begins, the last block (source and document), the ghost
        self._fates = FateIndex()
        self._body_start = 0
        self._tail = Tail(0, 0)
        self._text_end: int | None = None
        self._ghost: tuple[int, int] | None = None
        self._continue_link: tuple[int, int] | None = None  # "  Continue" after the last reply's note, if drawn
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(FLUSH_MS)
        self._timer.timeout.connect(self.flush)
        self._mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.anchorClicked.connect(self._on_anchor)
        self.xray: TokenXray | None = None  # the token X-ray popup, made on the first click on a token

        self._follow = True
        self._scrolling = False  # True while the view moves its own scroll bar
        self.jump_button = QToolButton(self)
        self.jump_button.setText("\u2193 Latest")
        self.jump_button.setToolTip("Jump to the latest message and follow the reply")
        self.jump_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.jump_button.setAutoFillBackground(True)
        self.jump_button.clicked.connect(self.jump_to_latest)
        self.jump_button.hide()
        self.hover_bar = HoverBar(self.viewport())  # Copy / Regenerate / Edit / Race over the hovered message
        self.hover_bar.hide()
        self.hover_index: int | None = None
        self._hover_busy = False
        self.viewport().setMouseTracking(True)
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self._on_range_changed)
        bar.valueChanged.connect(self._on_value_changed)
        # the most common code's lexer loads once the window is up rather than when a reply first shows code
        QTimer.singleShot(WARM_UP_MS, syntax.warm_up)

    # -- public API ----------------------------------------------------------------

    @property
    def hide_rejected(self) -> bool:
        """Rejected drafts hidden: no markers in the reading view, no struck text in the verdict view."""
        return self._hide_rejected

    def set_hide_rejected(self, hide: bool) -> None:
        if hide != self._hide_rejected:
            self._hide_rejected = hide
            self.redraw()

    @property
    def show_verdicts(self) -> bool:
        """True for the verdict view (raw text, every fate inline), False for the reading view."""
        return self._verdicts

    def set_show_verdicts(self, show: bool) -> None:
        if show != self._verdicts:
            self._verdicts = show
            self.redraw()
            self.verdicts_changed.emit(show)

    @property
    def streaming(self) -> bool:
        """True while a reply is being drawn as it streams."""
        return self._live is not None

    @property
    def following(self) -> bool:
        """True while the view keeps to the bottom as text arrives."""
        return self._follow

    def show_transcript(self, transcript: Transcript) -> None:
        """Draw another conversation (or the same one, changed other than by streaming)."""
        self.transcript = transcript
        self._timer.stop()
        self._queue.clear()
        last = transcript.messages[-1] if transcript.messages else None
        # a reply still streaming in it (its conversation was shown again) goes on drawing as it streams
        self._live = last if last is not None and last.role == "assistant" and not last.finished else None
        self._drawn = self._seen = len(self._live.spans or []) if self._live is not None else 0
        self._pending = None
        self._follow = True
        self.redraw()

    def append_message(self) -> None:
        """Draw the transcript's last message: a user message just added, or a reply just begun."""
        self.flush()
        self.hide_hover()  # which reply is the last one changed
        index = len(self.transcript.messages) - 1
        msg = self.transcript.messages[index]
        cursor = self._end_cursor()
        cursor.beginEditBlock()
        self._drop_continue_link(cursor)  # only the last reply goes on; the one above is no longer last
        self._insert_message(cursor, index)
        cursor.endEditBlock()
        if msg.role == "assistant" and not msg.finished:
            self._live = msg
            self._drawn = self._seen = len(msg.spans or [])
            self._pending = None
            self._pending_start = None
            self._ghost = None
        self.jump_to_latest()

    def feed(self, events: list[Drafted | Verified | Finished]) -> None:
        """Queue events already folded into the transcript; they are drawn on the next flush (about 30 ms)."""
        self._queue.extend(events)
        if self._queue and not self._timer.isActive():
            self._timer.start()

    def flush(self) -> None:
        """Draw queued events in one edit block."""
        self._timer.stop()
        if not self._queue:
            return
        events, self._queue = self._queue, []
        msg = self._live
        if msg is None or not self.transcript.messages or self.transcript.messages[-1] is not msg:
            return
        index = len(self.transcript.messages) - 1
        if self._verdicts:
            self._flush_verdicts(events, msg, index)
        else:
            self._flush_reading(events, msg, index)

    def jump_to_latest(self) -> None:
        """Scroll to the end and follow the text as it arrives."""
        self._follow = True
        self._scroll_to_end()
        self._update_jump()

    def message_index_at(self, pos: QPoint) -> int | None:
        """The index of the message under a viewport position."""
        cursor = self.cursorForPosition(pos)
        value = cursor.charFormat().property(PROP_MESSAGE)
        if value is None:
            cursor.movePosition(QTextCursor.MoveOperation.NextCharacter)
            value = cursor.charFormat().property(PROP_MESSAGE)
        return int(value) if value is not None else None

    def copy_message(self, index: int) -> None:
        """Put the message's text (its Markdown source, no rejected drafts) on the clipboard."""
        QGuiApplication.clipboard().setText(self.transcript.messages[index].content)

    def copy_code(self, index: int, offset: int) -> bool:
        """Put the code of the block at source ``offset`` of message ``index`` on the clipboard, without fences."""
        if not 0 <= index < len(self.transcript.messages):
            return False
        code = fence_code(self.transcript.messages[index].content, offset)
        if code is None:
            return False
        QGuiApplication.clipboard().setText(code)
        return True

    # -- reading view ------------------------------------------------------------------

    def _writer(self, index: int, fates: FateIndex) -> BodyWriter:
        return BodyWriter(self.palette(), self._mono, index, fates, not self._hide_rejected, self._body_start)

    def _insert_reading_body(self, cursor: QTextCursor, index: int) -> bool:
        """Draw a reply's Markdown; True if it drew any text."""
        msg = self.transcript.messages[index]
        self._body_start = cursor.position()
        fates = FateIndex(msg.spans or [])
        blocks = parse_blocks(msg.content)
        writer = self._writer(index, fates)
        tail = writer.write(cursor, blocks, 0)
        if msg is self._live or (msg.role == "assistant" and not msg.finished):
            self._fates = fates
            self._tail = tail
            self._text_end = writer.text_end
            self._ghost = None
        return writer.text_end is not None

    def _flush_reading(self, events: list[Drafted | Verified | Finished], msg: Message, index: int) -> None:
        changed = finished = False
        for event in events:
            if isinstance(event, Drafted):
                self._pending = event
            elif isinstance(event, Verified):
                self._pending = None
                self._seen += span_count(event)
                changed = True
            elif isinstance(event, Finished):
                self._pending = None
                finished = True
                break
        self._drawn = max(self._drawn, self._seen)
        cursor = self._end_cursor()
        cursor.beginEditBlock()
        self._remove_ghost(cursor)
        if changed or finished:
            self._render_tail(cursor, msg, index, final=finished)
        if finished:
            self._live = None
            end = self._end_cursor()
            self._insert_note(end, index, own_line=self._text_end is None or end.block().length() <= 1)
        else:
            self._insert_ghost(cursor, index)
        cursor.endEditBlock()

    def _render_tail(self, cursor: QTextCursor, msg: Message, index: int, final: bool) -> None:
        """Draw the streaming reply again from its tail (see ``markdown_render.Tail``) on; ``final`` at its end."""
        self._fates.update(msg.spans or [])
        blocks = parse_blocks(msg.content[self._tail.src:], self._tail.src)
        writer = self._writer(index, self._fates)
        self._tail = writer.write_tail(cursor, blocks, self._tail, final)
        self._text_end = writer.text_end

    def _insert_ghost(self, cursor: QTextCursor, index: int) -> None:
        pending = self._pending
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
        fmt = kind_format(TokenKind.PENDING, self.palette())
        fmt.setProperty(PROP_MESSAGE, index)
        fmt.setProperty(PROP_CHROME, True)
        fmt.setToolTip(f"pending draft · round {pending.round}")
        cursor.insertText(text, fmt)

    def _remove_ghost(self, cursor: QTextCursor) -> None:
        if self._ghost is None:
            return
        start, length = self._ghost
        remove_range(cursor, start, start + length)
        self._ghost = None

    # -- verdict view ------------------------------------------------------------------

    def _flush_verdicts(self, events: list[Drafted | Verified | Finished], msg: Message, index: int) -> None:
        spans = msg.spans or []
        cursor = self._end_cursor()
        cursor.beginEditBlock()
        for i, event in enumerate(events):
            if isinstance(event, Drafted):
                self._remove_pending(cursor)
                self._pending = event
                later = events[i + 1] if i + 1 < len(events) else None
                if not (isinstance(later, Verified) and later.round == event.round):
                    self._insert_pending(cursor, index)
            elif isinstance(event, Verified):
                self._remove_pending(cursor)
                self._pending = None
                self._seen += span_count(event)
                for span in spans[self._drawn:self._seen]:
                    self._insert_segment(cursor, _Segment(span.text, span), index)
                self._drawn = max(self._drawn, self._seen)
            elif isinstance(event, Finished):
                self._remove_pending(cursor)
                self._pending = None
                self._live = None
                if _code_ranges(msg.content):
                    cursor.setPosition(self._reply_start)
                    cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
                    cursor.removeSelectedText()
                    self._insert_verdict_body(cursor, index)
                else:
                    self._insert_note(cursor, index)
                break
        cursor.endEditBlock()

    def _insert_verdict_body(self, cursor: QTextCursor, index: int) -> None:
        for seg in _segments(self.transcript.messages[index]):
            self._insert_segment(cursor, seg, index)
        self._insert_note(cursor, index)

    def _shown(self, seg: _Segment) -> bool:
        return not (self._hide_rejected and seg.span is not None and seg.span.kind is TokenKind.REJECTED)

    def _insert_segment(self, cursor: QTextCursor, seg: _Segment, index: int) -> None:
        if not seg.text or not self._shown(seg):
            return
        if seg.span is None:
            fmt = reading_format(None, self.palette(), index)
        else:
            fmt = span_format(seg.span, self.palette(), index)
        if seg.code:
            fmt.setFontFamilies(self._mono.families())
        cursor.insertText(seg.text, fmt)

    def _insert_pending(self, cursor: QTextCursor, index: int) -> None:
        if self._pending is None or not self._pending.pieces:
            return
        self._pending_start = cursor.position()
        fmt = kind_format(TokenKind.PENDING, self.palette())
        fmt.setProperty(PROP_MESSAGE, index)
        fmt.setProperty(PROP_CHROME, True)
        fmt.setToolTip(f"pending draft · round {self._pending.round}")
        cursor.insertText("".join(self._pending.pieces), fmt)

    def _remove_pending(self, cursor: QTextCursor) -> None:
        if self._pending_start is None:
            return
        cursor.setPosition(self._pending_start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        self._pending_start = None

    # -- both views --------------------------------------------------------------------

    def redraw(self) -> None:
        """Draw every message of the transcript again, keeping the scroll position unless following."""
        self.hide_hover()
        messages = self.transcript.messages
        bar = self.verticalScrollBar()
        follow, value = self._follow, bar.value()
        self._scrolling = True
        try:
            self.document().clear()
            self._continue_link = None
            cursor = self._end_cursor()
            cursor.beginEditBlock()
            for index in range(len(messages)):
                self._insert_message(cursor, index)
            self._pending_start = None
            self._ghost = None
            if self._live is not None:
                if messages and messages[-1] is self._live and not self._live.finished:
                    self._reply_start = self._body_start
                    self._drawn = len(self._live.spans or [])
                    if self._verdicts:
                        self._insert_pending(cursor, len(messages) - 1)
                    else:
                        self._insert_ghost(cursor, len(messages) - 1)
                else:  # it finished meanwhile and was drawn whole: nothing queued is left to draw
                    self._live = None
                    self._queue.clear()
            cursor.endEditBlock()
            self._follow = follow
            if not follow:
                bar.setValue(min(value, bar.maximum()))
        finally:
            self._scrolling = False
        if follow:
            self._scroll_to_end()
        self._update_jump()

    def _end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _insert_message(self, cursor: QTextCursor, index: int) -> None:
        msg = self.transcript.messages[index]
        block = QTextBlockFormat()
        block.setBottomMargin(3)
        if self.document().isEmpty():
            cursor.setBlockFormat(block)
        else:
            block.setTopMargin(16)
            new_block(cursor, block)
        header = QTextCharFormat()
        header.setFontWeight(QFont.Weight.Bold)
        header.setFontCapitalization(QFont.Capitalization.SmallCaps)
        header.setForeground(self.palette().color(QPalette.ColorRole.PlaceholderText))
        header.setProperty(PROP_MESSAGE, index)
        cursor.insertText("You" if msg.role == "user" else msg.role.capitalize(), header)
        if msg.versions > 1:  # regenerated or edited: which version this is; the arrows flip it
            header.setFontCapitalization(QFont.Capitalization.MixedCase)
            header.setFontWeight(QFont.Weight.Normal)
            header.setToolTip("Other versions: click the arrows, or Alt+Left / Alt+Right")
            cursor.insertText("  ", header)
            self._insert_version_arrow(cursor, header, index, -1)
            cursor.insertText(f" {msg.version}/{msg.versions} ", header)
            self._insert_version_arrow(cursor, header, index, +1)
        if msg.role == "assistant" and not self._verdicts:
            drew = self._insert_reading_body(cursor, index)
            self._insert_note(cursor, index, own_line=not drew or cursor.block().length() <= 1)
            return
        cursor.insertBlock(QTextBlockFormat())
        self._body_start = cursor.position()
        if msg.role == "assistant":
            self._reply_start = self._body_start
            self._insert_verdict_body(cursor, index)
        else:
            cursor.insertText(msg.text, reading_format(None, self.palette(), index))

    def _insert_version_arrow(self, cursor: QTextCursor, header: QTextCharFormat, index: int, step: int) -> None:
        """‹ or ›: a link to the previous or next version, or a greyed arrow at the first or last one."""
        msg = self.transcript.messages[index]
        arrow = QTextCharFormat(header)
        arrow.setFontWeight(QFont.Weight.Bold)
        if 1 <= msg.version + step <= msg.versions:
            arrow.setAnchor(True)
            arrow.setAnchorHref(f"specchat:version/{index}/{step}")
            arrow.setForeground(self.palette().color(QPalette.ColorRole.Link))
            arrow.setToolTip(f"{'Previous' if step < 0 else 'Next'} version "
                             f"({'Alt+Left' if step < 0 else 'Alt+Right'})")
        cursor.insertText("‹" if step < 0 else "›", arrow)

    def _insert_note(self, cursor: QTextCursor, index: int, own_line: bool = False) -> None:
        note = finish_note(self.transcript.messages[index])
        if note:
            if own_line:  # a reply with no text, or one ending in a code box or table
                new_block(cursor, QTextBlockFormat())
            fmt = QTextCharFormat()
            fmt.setFontItalic(True)
            fmt.setForeground(self.palette().color(QPalette.ColorRole.PlaceholderText))
            fmt.setProperty(PROP_MESSAGE, index)
            fmt.setProperty(PROP_CHROME, True)
            cursor.insertText(f" ({note})", fmt)
            if index == len(self.transcript.messages) - 1 and self.transcript.can_continue():
                link = QTextCharFormat(fmt)
                link.setFontItalic(False)
                link.setFontWeight(QFont.Weight.DemiBold)
                link.setForeground(self.palette().color(QPalette.ColorRole.Link))
                link.setAnchor(True)
                link.setAnchorHref(f"specchat:continue/{index}/0")
                link.setToolTip("Go on from where the limit cut the reply, into the same message")
                start = cursor.position()
                cursor.insertText("  ", fmt)
                cursor.insertText("Continue", link)
                self._continue_link = (start, cursor.position())

    def _drop_continue_link(self, cursor: QTextCursor) -> None:
        """Remove the "Continue" link drawn after a reply that is no longer the last (its note stays)."""
        if self._continue_link is None:
            return
        start, end = self._continue_link
        self._continue_link = None
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        cursor.movePosition(QTextCursor.MoveOperation.End)

    def token_at(self, pos: QPoint) -> TokenSpan | None:
        """The span with an X-ray detail under a viewport position (either look), or None."""
        fmt = self._format_at(pos)
        position, index, round_ = (fmt.property(p) for p in (PROP_POSITION, PROP_MESSAGE, PROP_ROUND))
        if position is None or index is None or round_ is None or not 0 <= index < len(self.transcript.messages):
            return None
        for span in self.transcript.messages[index].spans or []:
            if span.round == round_ and span.detail is not None and span.detail.position == position:
                return span
        return None

    def show_xray(self, span: TokenSpan, at: QPoint) -> TokenXray:
        """Open the token X-ray for ``span`` near global position ``at``."""
        if self.xray is None:
            self.xray = TokenXray(self)
        self.xray.show_span(span, at)
        return self.xray

    def _format_at(self, pos: QPoint) -> QTextCharFormat:
        """The format of the character under a viewport position; an empty one over blank space.

        ``cursorForPosition`` finds the nearest place in the text from anywhere (below the last reply, right
        of a short line): only a point inside a character's own box counts as on it.
        """
        cursor = self.cursorForPosition(pos)
        here = self.cursorRect(cursor)
        for step in (QTextCursor.MoveOperation.NextCharacter, QTextCursor.MoveOperation.PreviousCharacter):
            other = QTextCursor(cursor)
            if not other.movePosition(step) or other.block() != cursor.block():
                continue
            there = self.cursorRect(other)
            if there.top() != here.top():
                continue  # the character wraps onto another line
            left, right = sorted((here.x(), there.x()))
            if left <= pos.x() < right and here.top() <= pos.y() <= here.bottom():
                return other.charFormat() if step is QTextCursor.MoveOperation.NextCharacter else cursor.charFormat()
        return QTextCharFormat()

    # -- following the stream ------------------------------------------------------------

    def _scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        self._scrolling = True
        try:
            bar.setValue(bar.maximum())
        finally:
            self._scrolling = False

    def _on_range_changed(self, _low: int, _high: int) -> None:
        if self._follow:
            self._scroll_to_end()
        self._update_jump()

    def _on_value_changed(self, value: int) -> None:
        self.hide_hover()  # its place was for the old scroll position
        if not self._scrolling:
            self._follow = value >= self.verticalScrollBar().maximum() - FOLLOW_SLACK
        self._update_jump()

    def _update_jump(self) -> None:
        show = not self._follow and self.verticalScrollBar().maximum() > 0
        if show:
            self._place_jump()
            self.jump_button.raise_()
        self.jump_button.setVisible(show)

    def _place_jump(self) -> None:
        area = self.viewport().geometry()
        size = self.jump_button.sizeHint()
        self.jump_button.setGeometry(area.right() - size.width() - 12, area.bottom() - size.height() - 12,
                                     size.width(), size.height())

    # -- Qt events ---------------------------------------------------------------------

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._place_jump()

    def viewportEvent(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            help_event = cast(QHelpEvent, event)
            tip = self._format_at(help_event.pos()).toolTip()
            if tip:
                QToolTip.showText(help_event.globalPos(), tip, self.viewport())
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        if event.type() == QEvent.Type.MouseMove:
            move = cast(QMouseEvent, event)
            if move.buttons() == Qt.MouseButton.NoButton:
                self.hover_at(move.position().toPoint())
        elif (event.type() == QEvent.Type.Leave
                and not self.hover_bar.geometry().contains(self.viewport().mapFromGlobal(QCursor.pos()))):
            self.hide_hover()
        return super().viewportEvent(event)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self.redraw()

    def copy_selection(self) -> None:
        """Copy the selection's text without markers, labels or pending drafts (Ctrl+C, the menu's Copy).

        Done here rather than by overriding ``createMimeDataFromSelection``: a QMimeData made in
        Python and handed to the clipboard was freed twice at exit (a segfault after the tests).
        """
        cursor = self.textCursor()
        if cursor.hasSelection():
            text = clean_text(self.document(), cursor.selectionStart(), cursor.selectionEnd())
            QGuiApplication.clipboard().setText(text)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        super().mouseReleaseEvent(event)
        pos = event.position().toPoint()
        if (event.button() is Qt.MouseButton.LeftButton and not self.textCursor().hasSelection()
                and not self.anchorAt(pos)):
            span = self.token_at(pos)
            if span is not None:  # opened once the click is done: a popup shown inside it takes the release
                event.accept()
                at = event.globalPosition().toPoint()
                QTimer.singleShot(0, self, lambda: self.show_xray(span, at))

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.matches(QKeySequence.StandardKey.Copy):
            self.copy_selection()
            event.accept()
            return
        super().keyPressEvent(event)

    def _on_anchor(self, url: QUrl) -> None:
        if url.scheme() != "specchat":
            if url.scheme() in ("http", "https", "mailto"):
                QDesktopServices.openUrl(url)
            return
        what, _, rest = url.path().partition("/")
        try:
            index_text, _, keys_text = rest.partition("/")
            index, keys = int(index_text), [int(k) for k in keys_text.split(".")]
        except ValueError:
            return
        if what == "continue":
            if index == len(self.transcript.messages) - 1 and not self.streaming:
                self.continue_requested.emit()
        elif what == "version":
            if not self.streaming:
                self.version_requested.emit(index, keys[0])
        elif what == "copy" and self.copy_code(index, keys[0]):
            QToolTip.showText(QCursor.pos(), "Copied", self.viewport())
        elif what == "rejected" and 0 <= index < len(self.transcript.messages):
            fates = FateIndex(self.transcript.messages[index].spans or [])
            groups = [r.spans for r in fates.rejections if r.first_span in keys]
            if groups:
                QToolTip.showText(QCursor.pos(), rejection_tooltip(groups), self.viewport())

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        menu = self.context_menu(event.pos())
        menu.exec(event.globalPos())
        menu.deleteLater()

    def context_menu(self, pos: QPoint) -> QMenu:
        """The menu at a viewport position: Qt's own (its Copy giving clean text) plus the message's actions."""
        menu = self.createStandardContextMenu(pos)
        menu.setToolTipsVisible(True)  # a disabled race says why
        for action in menu.actions():
            if action.objectName() == "edit-copy":  # Qt's own Copy: the clean text instead
                action.triggered.disconnect()
                action.triggered.connect(lambda *_: self.copy_selection())
        index = self.message_index_at(pos)
        code = self._format_at(pos).property(PROP_CODE)
        if index is not None and code is not None:
            copy_code = QAction("Copy code block", menu)
            copy_code.triggered.connect(lambda: self.copy_code(index, int(code)))
            menu.addAction(copy_code)
        for action in self.message_actions(index):
            menu.addAction(action)
        return menu

    def message_actions(self, index: int | None) -> list[QAction]:
        """Copy / regenerate / edit actions for the message at ``index``."""
        if index is None or not 0 <= index < len(self.transcript.messages):
            return []
        actions: list[QAction] = []
        copy = QAction("Copy message", self)
        copy.setObjectName("copy")
        copy.triggered.connect(lambda: self.copy_message(index))
        actions.append(copy)
        msg = self.transcript.messages[index]
        busy = self.streaming
        if msg.role == "assistant" and index == len(self.transcript.messages) - 1:
            regen = QAction("Regenerate reply", self)
            regen.setObjectName("regenerate")
            regen.setEnabled(not busy)
            regen.triggered.connect(lambda *_: self.regenerate_requested.emit())
            actions.append(regen)
        if msg.role == "user":
            edit = QAction("Edit and resend", self)
            edit.setObjectName("edit")
            edit.setEnabled(not busy)
            edit.triggered.connect(lambda: self.edit_requested.emit(index))
            actions.append(edit)
        if msg.role == "assistant" and index == len(self.transcript.messages) - 1 and self.transcript.can_continue():
            go_on = QAction("Continue the reply", self)
            go_on.setEnabled(not busy)
            go_on.triggered.connect(lambda *_: self.continue_requested.emit())
            actions.append(go_on)
        if msg.role == "assistant":
            actions.append(self.race_action(index))
        for label, step in (("Previous version", -1), ("Next version", +1)):
            if msg.versions > 1:
                flip = QAction(f"{label} ({msg.version}/{msg.versions})", self)
                flip.setEnabled(not busy and 1 <= msg.version + step <= msg.versions)
                flip.triggered.connect(lambda *_, s=step: self.version_requested.emit(index, s))
                actions.append(flip)
        return actions


    def hover_at(self, pos: QPoint) -> None:
        """Show the hover toolbar at the top-right of the message under viewport ``pos`` (hide it off messages)."""
        index = self.message_index_at(pos)
        if index is None or not 0 <= index < len(self.transcript.messages):
            self.hide_hover()
            return
        if index != self.hover_index or not self.hover_bar.isVisible() or self.streaming != self._hover_busy:
            keep = ("copy", "regenerate", "edit", "race")
            actions = []
            for action in self.message_actions(index):
                if action.objectName() in keep:
                    actions.append(action)
                else:
                    action.deleteLater()
            self.hover_bar.set_actions(actions)
            self.hover_index, self._hover_busy = index, self.streaming
        # Its bottom on the header line's: it covers the gap above the message and the header, never the text.
        header_bottom = header_bottom_of(self.cursorForPosition(pos).block(), index)
        size = self.hover_bar.sizeHint()
        x = self.viewport().width() - size.width() - 6
        y = max(0, header_bottom - size.height() - self.verticalScrollBar().value())
        self.hover_bar.setGeometry(x, y, size.width(), size.height())
        self.hover_bar.show()
        self.hover_bar.raise_()

    def hide_hover(self) -> None:
        self.hover_bar.hide()
        self.hover_index = None

    def race_action(self, index: int) -> QAction:
        """Race plain decoding on the reply at ``index``, or replay its stored race."""
        msg = self.transcript.messages[index]
        stored = RaceRecord.from_dict(msg.figures.race if msg.figures else None) is not None
        action = QAction("Replay the race with plain decoding" if stored else "Race plain decoding", self)
        refusal = "wait for the reply to finish" if self.streaming else race_refusal(msg)
        action.setObjectName("race")
        action.setEnabled(not refusal)
        action.setToolTip(refusal or ("Replay both streams at their recorded pace" if stored else
                                      "Decode the same prompt with the target alone and replay both side by side"))
        action.triggered.connect(lambda *_: self.race_requested.emit(index))
        return action


class TokenLegend(QLabel):
    """A one-line legend of the token styles, following the palette and, given a view, its look."""

    def __init__(self, parent: QWidget | None = None, view: ChatView | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.RichText)
        self._verdicts = view.show_verdicts if view is not None else False
        if view is not None:
            view.verdicts_changed.connect(self.set_verdicts)
        self._update()

    def set_verdicts(self, verdicts: bool) -> None:
        """Show the verdict view's styles (True) or the reading view's (False)."""
        self._verdicts = verdicts
        self._update()

    def _update(self) -> None:
        self.setText(legend_html(self.palette(), self._verdicts))

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._update()


__all__ = ["ChatView", "TokenLegend", "clean_text", "finish_note"]
