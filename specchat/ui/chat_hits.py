"""What is under the mouse in the chat view: the character's format, its message, its token (for the X-ray),
and the hover bar of actions placed over that message's header."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QPoint
from PySide6.QtGui import QAction, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextBrowser

from specchat.core.chat.transcript import TokenSpan, Transcript

from .hover_bar import HoverBar, header_bottom_of
from .token_styles import PROP_MESSAGE, PROP_POSITION, PROP_ROUND

_HOVER_ACTIONS = ("copy", "regenerate", "edit", "race")  # of a message's actions, those the hover bar shows


def format_at(browser: QTextBrowser, pos: QPoint) -> QTextCharFormat:
    """The format of the character under a viewport position; an empty one over blank space.

    ``cursorForPosition`` finds the nearest place in the text from anywhere (below the last reply, right
    of a short line): only a point inside a character's own box counts as on it.
    """
    cursor = browser.cursorForPosition(pos)
    here = browser.cursorRect(cursor)
    for step in (QTextCursor.MoveOperation.NextCharacter, QTextCursor.MoveOperation.PreviousCharacter):
        other = QTextCursor(cursor)
        if not other.movePosition(step) or other.block() != cursor.block():
            continue
        there = browser.cursorRect(other)
        if there.top() != here.top():
            continue  # the character wraps onto another line
        left, right = sorted((here.x(), there.x()))
        if left <= pos.x() < right and here.top() <= pos.y() <= here.bottom():
            return other.charFormat() if step is QTextCursor.MoveOperation.NextCharacter else cursor.charFormat()
    return QTextCharFormat()


def message_index_at(browser: QTextBrowser, pos: QPoint) -> int | None:
    """The index of the message under a viewport position."""
    cursor = browser.cursorForPosition(pos)
    value = cursor.charFormat().property(PROP_MESSAGE)
    if value is None:
        cursor.movePosition(QTextCursor.MoveOperation.NextCharacter)
        value = cursor.charFormat().property(PROP_MESSAGE)
    return int(value) if value is not None else None


def token_at(browser: QTextBrowser, transcript: Transcript, pos: QPoint) -> TokenSpan | None:
    """The span with an X-ray detail under a viewport position (either look), or None."""
    fmt = format_at(browser, pos)
    position, index, round_ = (fmt.property(p) for p in (PROP_POSITION, PROP_MESSAGE, PROP_ROUND))
    if position is None or index is None or round_ is None or not 0 <= index < len(transcript.messages):
        return None
    spans: list[TokenSpan] = transcript.messages[index].spans or []
    for span in spans:
        if span.round == round_ and span.detail is not None and span.detail.position == position:
            return span
    return None


class Hover:
    """The hover bar (Copy / Regenerate / Edit / Race) over the message under the mouse."""

    def __init__(self, browser: QTextBrowser, actions: Callable[[int], list[QAction]]) -> None:
        self._browser = browser
        self._actions = actions  # a message's actions, by its index
        self.bar = HoverBar(browser.viewport())
        self.bar.hide()
        self.index: int | None = None  # the message the bar is over
        self._busy = False  # whether a reply streamed when its actions were made (they are enabled by it)

    def show_at(self, pos: QPoint, count: int, busy: bool) -> None:
        """Show the bar at the top-right of the message under viewport ``pos`` (hide it off messages); ``count``
        messages are shown, and ``busy`` says whether a reply streams."""
        index = message_index_at(self._browser, pos)
        if index is None or not 0 <= index < count:
            self.hide()
            return
        if index != self.index or not self.bar.isVisible() or busy != self._busy:
            actions = []
            for action in self._actions(index):
                if action.objectName() in _HOVER_ACTIONS:
                    actions.append(action)
                else:
                    action.deleteLater()
            self.bar.set_actions(actions)
            self.index, self._busy = index, busy
        # Its bottom on the header line's: it covers the gap above the message and the header, never the text.
        header_bottom = header_bottom_of(self._browser.cursorForPosition(pos).block(), index)
        size = self.bar.sizeHint()
        x = self._browser.viewport().width() - size.width() - 6
        y = max(0, header_bottom - size.height() - self._browser.verticalScrollBar().value())
        self.bar.setGeometry(x, y, size.width(), size.height())
        self.bar.show()
        self.bar.raise_()

    def hide(self) -> None:
        self.bar.hide()
        self.index = None
