"""The conversation view: append-only rich text with one style per token kind.

The view draws a ``Transcript`` (core/chat/transcript.py) that the window owns
and folds engine events into; the view never changes it. Events are queued by
``feed`` and drawn on a ~30 ms timer inside one edit block, so the GUI thread
never lays out text per token. Hiding rejected tokens or a palette change
redraws from the transcript.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPoint, Qt, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QContextMenuEvent,
    QFont,
    QFontDatabase,
    QGuiApplication,
    QPalette,
    QTextCharFormat,
    QTextCursor,
)
from PySide6.QtWidgets import QLabel, QTextBrowser, QToolTip, QWidget

from specchat.core.chat.transcript import Message, TokenSpan, Transcript, span_count
from specchat.core.types import Drafted, Finished, TokenKind, Verified

from .token_styles import PROP_MESSAGE, kind_format, legend_html, span_format

FLUSH_MS = 30
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
    return _NOTES.get(msg.finish_reason, "")


@dataclass
class _Segment:
    text: str
    span: TokenSpan | None
    code: bool = False


def _code_ranges(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _FENCE.finditer(text)]


def _segments(msg: Message) -> Iterator[_Segment]:
    """Split a message into runs, marking those inside ``` fences once the message is finished."""
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


class ChatView(QTextBrowser):
    """Read-only view of a conversation with live speculative-decoding highlighting."""

    regenerate_requested = Signal()
    edit_requested = Signal(int)  # index of the user message to edit and resend

    def __init__(self, parent: QWidget | None = None, transcript: Transcript | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setOpenLinks(False)
        self.setUndoRedoEnabled(False)
        self.document().setDocumentMargin(10)
        self.transcript = transcript if transcript is not None else Transcript()
        self._hide_rejected = False
        self._queue: list[Drafted | Verified | Finished] = []
        self._live: Message | None = None  # the reply being drawn as it streams
        self._drawn = 0  # spans of the live reply already drawn
        self._seen = 0  # spans of the live reply that the queued events drawn so far account for
        self._pending: Drafted | None = None
        self._pending_start: int | None = None
        self._body_start = 0
        self._reply_start = 0  # document position where the streaming reply's text begins
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(FLUSH_MS)
        self._timer.timeout.connect(self.flush)
        self._mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)

    # -- public API ----------------------------------------------------------------

    @property
    def hide_rejected(self) -> bool:
        return self._hide_rejected

    def set_hide_rejected(self, hide: bool) -> None:
        if hide != self._hide_rejected:
            self._hide_rejected = hide
            self.redraw()

    @property
    def streaming(self) -> bool:
        """True while a reply is being drawn as it streams."""
        return self._live is not None

    def show_transcript(self, transcript: Transcript) -> None:
        """Draw another conversation (or the same one, changed other than by streaming)."""
        self.transcript = transcript
        self._timer.stop()
        self._queue.clear()
        self._live = None
        self._pending = None
        self.redraw()

    def append_message(self) -> None:
        """Draw the transcript's last message: a user message just added, or a reply just begun."""
        self.flush()
        index = len(self.transcript.messages) - 1
        msg = self.transcript.messages[index]
        self._insert_message(self._end_cursor(), index)
        if msg.role == "assistant" and not msg.finished:
            self._live = msg
            self._reply_start = self._body_start
            self._drawn = self._seen = len(msg.spans or [])
            self._pending = None
            self._pending_start = None
        self._scroll_to_end()

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
        bar = self.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        index = len(self.transcript.messages) - 1
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
                    self._insert_body(cursor, index)
                else:
                    self._insert_note(cursor, index)
                break
        cursor.endEditBlock()
        if at_end:
            self._scroll_to_end()

    def message_index_at(self, pos: QPoint) -> int | None:
        """The index of the message under a viewport position."""
        cursor = self.cursorForPosition(pos)
        value = cursor.charFormat().property(PROP_MESSAGE)
        if value is None:
            cursor.movePosition(QTextCursor.MoveOperation.NextCharacter)
            value = cursor.charFormat().property(PROP_MESSAGE)
        return int(value) if value is not None else None

    def copy_message(self, index: int) -> None:
        QGuiApplication.clipboard().setText(self.transcript.messages[index].content)

    # -- rendering -------------------------------------------------------------------

    def redraw(self) -> None:
        """Draw every message of the transcript again."""
        messages = self.transcript.messages
        self.document().clear()
        cursor = self._end_cursor()
        cursor.beginEditBlock()
        for index in range(len(messages)):
            self._insert_message(cursor, index)
        self._pending_start = None
        if self._live is not None:
            if messages and messages[-1] is self._live and not self._live.finished:
                self._reply_start = self._body_start
                self._drawn = len(self._live.spans or [])
                if self._pending is not None:
                    self._insert_pending(cursor, len(messages) - 1)
            else:  # it finished meanwhile and was drawn whole: nothing queued is left to draw
                self._live = None
                self._queue.clear()
        cursor.endEditBlock()
        self._scroll_to_end()

    def _shown(self, seg: _Segment) -> bool:
        return not (self._hide_rejected and seg.span is not None and seg.span.kind is TokenKind.REJECTED)

    def _end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _insert_message(self, cursor: QTextCursor, index: int) -> None:
        msg = self.transcript.messages[index]
        if not self.document().isEmpty():
            cursor.insertBlock()
            cursor.insertBlock()
        header = QTextCharFormat()
        header.setFontWeight(QFont.Weight.Bold)
        header.setFontCapitalization(QFont.Capitalization.SmallCaps)
        header.setForeground(self.palette().color(QPalette.ColorRole.PlaceholderText))
        header.setProperty(PROP_MESSAGE, index)
        cursor.insertText("You" if msg.role == "user" else msg.role.capitalize(), header)
        cursor.insertBlock()
        self._body_start = cursor.position()
        self._insert_body(cursor, index)

    def _insert_body(self, cursor: QTextCursor, index: int) -> None:
        for seg in _segments(self.transcript.messages[index]):
            if self._shown(seg):
                self._insert_segment(cursor, seg, index)
        self._insert_note(cursor, index)

    def _insert_note(self, cursor: QTextCursor, index: int) -> None:
        note = finish_note(self.transcript.messages[index])
        if note:
            fmt = QTextCharFormat()
            fmt.setFontItalic(True)
            fmt.setForeground(self.palette().color(QPalette.ColorRole.PlaceholderText))
            fmt.setProperty(PROP_MESSAGE, index)
            cursor.insertText(f" ({note})", fmt)

    def _insert_segment(self, cursor: QTextCursor, seg: _Segment, index: int) -> None:
        if not seg.text or not self._shown(seg):
            return
        if seg.span is None:
            fmt = QTextCharFormat()
            fmt.setForeground(self.palette().color(QPalette.ColorRole.Text))
            fmt.setProperty(PROP_MESSAGE, index)
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
        fmt.setToolTip(f"pending draft · round {self._pending.round}")
        cursor.insertText("".join(self._pending.pieces), fmt)

    def _remove_pending(self, cursor: QTextCursor) -> None:
        if self._pending_start is None:
            return
        cursor.setPosition(self._pending_start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        self._pending_start = None

    def _scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    # -- Qt events ---------------------------------------------------------------------

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.ToolTip:
            cursor = self.cursorForPosition(event.pos())
            tip = cursor.charFormat().toolTip()
            if tip:
                QToolTip.showText(event.globalPos(), tip, self.viewport())
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        return super().viewportEvent(event)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self.redraw()

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802 - Qt override
        menu = self.createStandardContextMenu(event.pos())
        index = self.message_index_at(event.pos())
        for action in self.message_actions(index):
            menu.addAction(action)
        menu.exec(event.globalPos())
        menu.deleteLater()

    def message_actions(self, index: int | None) -> list[QAction]:
        """Copy / regenerate / edit actions for the message at ``index``."""
        if index is None or not 0 <= index < len(self.transcript.messages):
            return []
        actions: list[QAction] = []
        copy = QAction("Copy message", self)
        copy.triggered.connect(lambda: self.copy_message(index))
        actions.append(copy)
        msg = self.transcript.messages[index]
        busy = self.streaming
        if msg.role == "assistant" and index == len(self.transcript.messages) - 1:
            regen = QAction("Regenerate reply", self)
            regen.setEnabled(not busy)
            regen.triggered.connect(lambda *_: self.regenerate_requested.emit())
            actions.append(regen)
        if msg.role == "user":
            edit = QAction("Edit and resend", self)
            edit.setEnabled(not busy)
            edit.triggered.connect(lambda: self.edit_requested.emit(index))
            actions.append(edit)
        return actions


class TokenLegend(QLabel):
    """A one-line legend of the token styles, following the palette."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.RichText)
        self._update()

    def _update(self) -> None:
        self.setText(legend_html(self.palette()))

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._update()


__all__ = ["ChatView", "TokenLegend"]
