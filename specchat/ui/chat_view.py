"""The conversation view: replies as rendered Markdown with their token fates, or the raw verdict view.

The view draws a ``Transcript`` (core/chat/transcript.py) that the window owns
and folds engine events into; the view never changes it. Events are queued by
``feed`` and drawn on a ~30 ms timer inside one edit block (chat_queue.py).

Two looks, each a :class:`~specchat.ui.chat_page.Renderer`. The reading view
(the default, chat_reading.py) renders each reply as Markdown with a light
touch of the fates: accepted drafts tinted, rejections as small markers whose
tooltip or click shows the draft's guess. While a reply streams only its last
top-level block is drawn again on each flush, so the GUI never lays out the
whole reply per token. The verdict view (``set_show_verdicts``,
chat_verdicts.py) shows the raw text with every fate inline in the strong
styles, rejected drafts struck through. Switching looks, hiding rejections or a
palette change redraws from the transcript.

The view follows a streaming reply unless the user scrolls up; a "jump to
latest" button then floats over the bottom-right corner (chat_scroll.py). What
is under the mouse, the hover bar and the token X-ray: chat_hits.py; a
message's actions, links and clean copies: chat_actions.py; headers, notes and
the state the looks share: chat_page.py.
"""

from __future__ import annotations

from typing import cast

from PySide6.QtCore import QEvent, QPoint, Qt, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QContextMenuEvent,
    QCursor,
    QFontDatabase,
    QHelpEvent,
    QKeyEvent,
    QKeySequence,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QResizeEvent,
    QShowEvent,
)
from PySide6.QtWidgets import QFrame, QLabel, QMenu, QTextBrowser, QToolTip, QWidget

from specchat.core.chat.transcript import TokenSpan, Transcript

from . import syntax
from .chat_actions import MessageActions, Requests, clean_text
from .chat_cards import DOCUMENT_MARGIN, column_margin, paint_cards
from .chat_hits import Hover, format_at, message_index_at, token_at
from .chat_page import Page, Renderer, StreamEvent, finish_note
from .chat_queue import EventQueue
from .chat_reading import ReadingRenderer
from .chat_scroll import FollowScroll
from .chat_verdicts import VerdictRenderer
from .hover_bar import HoverBar
from .token_styles import legend_html
from .token_xray import TokenXray

WARM_UP_MS = 300


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
        self.document().setDocumentMargin(DOCUMENT_MARGIN)
        self.document().setIndentWidth(22)
        self._mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self._page = Page(self, transcript if transcript is not None else Transcript(), self._mono)
        self._verdicts = False
        self._reading = ReadingRenderer(self._page)
        self._verdict_look = VerdictRenderer(self._page)
        self._queue = EventQueue(self, self.flush)
        self._actions = MessageActions(
            self,
            self._page,
            Requests(
                regenerate=self.regenerate_requested.emit,
                edit=self.edit_requested.emit,
                version=self.version_requested.emit,
                race=self.race_requested.emit,
                go_on=self.continue_requested.emit,
            ),
        )
        self.anchorClicked.connect(self._actions.on_anchor)
        self.xray: TokenXray | None = None  # the token X-ray popup, made on the first click on a token

        self._hover = Hover(self, self.message_actions)  # Copy / Regenerate / Edit / Race over the hovered message
        self.hover_bar: HoverBar = self._hover.bar
        self._scroll = FollowScroll(self, self.hide_hover)  # hide the hover bar: its place was for the old position
        self.jump_button = self._scroll.jump_button
        self.viewport().setMouseTracking(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setAutoFillBackground(True)  # the sides of a wide window's column: the page's colour
        self.setBackgroundRole(QPalette.ColorRole.Base)
        # the most common code's lexer loads once the window is up rather than when a reply first shows code
        QTimer.singleShot(WARM_UP_MS, syntax.warm_up)

    # -- public API ----------------------------------------------------------------

    @property
    def transcript(self) -> Transcript:
        """The transcript drawn (the window's; the view never changes it)."""
        return self._page.transcript

    @transcript.setter
    def transcript(self, transcript: Transcript) -> None:
        self._page.transcript = transcript

    @property
    def hide_rejected(self) -> bool:
        """Rejected drafts hidden: no markers in the reading view, no struck text in the verdict view."""
        return self._page.hide_rejected

    def set_hide_rejected(self, hide: bool) -> None:
        if hide != self._page.hide_rejected:
            self._page.hide_rejected = hide
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
        return self._page.live is not None

    @property
    def following(self) -> bool:
        """True while the view keeps to the bottom as text arrives."""
        return self._scroll.follow

    @property
    def hover_index(self) -> int | None:
        """The message the hover bar is over, or None."""
        return self._hover.index

    @property
    def _renderer(self) -> Renderer:
        return self._verdict_look if self._verdicts else self._reading

    def show_transcript(self, transcript: Transcript) -> None:
        """Draw another conversation (or the same one, changed other than by streaming)."""
        page = self._page
        page.transcript = transcript
        self._queue.clear()
        last = transcript.messages[-1] if transcript.messages else None
        # a reply still streaming in it (its conversation was shown again) goes on drawing as it streams
        page.live = last if last is not None and last.role == "assistant" and not last.finished else None
        page.drawn = page.seen = len(page.live.spans or []) if page.live is not None else 0
        page.pending = None
        self._scroll.follow = True
        self.redraw()

    def append_message(self) -> None:
        """Draw the transcript's last message: a user message just added, or a reply just begun."""
        self.flush()
        self.hide_hover()  # which reply is the last one changed
        page = self._page
        index = len(page.transcript.messages) - 1
        msg = page.transcript.messages[index]
        cursor = page.end_cursor()
        cursor.beginEditBlock()
        page.drop_continue_link(cursor)  # only the last reply goes on; the one above is no longer last
        self._renderer.insert_message(cursor, index)
        cursor.endEditBlock()
        if msg.role == "assistant" and not msg.finished:
            page.live = msg
            page.drawn = page.seen = len(msg.spans or [])
            page.pending = None
            self._reading.forget_pending()
            self._verdict_look.forget_pending()
        self.jump_to_latest()

    def feed(self, events: list[StreamEvent]) -> None:
        """Queue events already folded into the transcript; they are drawn on the next flush (about 30 ms)."""
        self._queue.push(events)

    def flush(self) -> None:
        """Draw queued events in one edit block."""
        events = self._queue.take()
        if not events:
            return
        page = self._page
        msg = page.live
        if msg is None or not page.transcript.messages or page.transcript.messages[-1] is not msg:
            return
        self._renderer.flush(events, msg, len(page.transcript.messages) - 1)

    def redraw(self) -> None:
        """Draw every message of the transcript again, keeping the scroll position unless following."""
        self.hide_hover()
        page = self._page
        messages = page.transcript.messages
        with self._scroll.kept():
            self.document().clear()
            page.continue_link = None
            cursor = page.end_cursor()
            cursor.beginEditBlock()
            for index in range(len(messages)):
                self._renderer.insert_message(cursor, index)
            self._reading.forget_pending()
            self._verdict_look.forget_pending()
            if page.live is not None:
                if messages and messages[-1] is page.live and not page.live.finished:
                    page.reply_start = page.body_start
                    page.drawn = len(page.live.spans or [])
                    self._renderer.insert_pending(cursor, len(messages) - 1)
                else:  # it finished meanwhile and was drawn whole: nothing queued is left to draw
                    page.live = None
                    self._queue.discard()
            cursor.endEditBlock()

    def jump_to_latest(self) -> None:
        """Scroll to the end and follow the text as it arrives."""
        self._scroll.jump_to_latest()

    def message_index_at(self, pos: QPoint) -> int | None:
        """The index of the message under a viewport position."""
        return message_index_at(self, pos)

    def token_at(self, pos: QPoint) -> TokenSpan | None:
        """The span with an X-ray detail under a viewport position (either look), or None."""
        return token_at(self, self._page.transcript, pos)

    def show_xray(self, span: TokenSpan, at: QPoint) -> TokenXray:
        """Open the token X-ray for ``span`` near global position ``at``."""
        if self.xray is None:
            self.xray = TokenXray(self)
        self.xray.show_span(span, at, self._passes_of(span))
        return self.xray

    def _passes_of(self, span: TokenSpan) -> int:
        """The target passes of the reply that holds ``span`` (0 when not known)."""
        for msg in self._page.transcript.messages:
            if msg.figures is not None and msg.spans and any(s is span for s in msg.spans):
                return msg.figures.passes
        return 0

    def hover_at(self, pos: QPoint) -> None:
        """Show the hover toolbar at the top-right of the message under viewport ``pos`` (hide it off messages)."""
        self._hover.show_at(pos, len(self._page.transcript.messages), self.streaming)

    def hide_hover(self) -> None:
        self._hover.hide()

    # -- a message's actions (chat_actions.py) ----------------------------------------

    def copy_message(self, index: int) -> None:
        """Put the message's text (its Markdown source, no rejected drafts) on the clipboard."""
        self._actions.copy_message(index)

    def copy_code(self, index: int, offset: int) -> bool:
        """Put the code of the block at source ``offset`` of message ``index`` on the clipboard, without fences."""
        return self._actions.copy_code(index, offset)

    def copy_selection(self) -> None:
        """Copy the selection's text without markers, labels or pending drafts (Ctrl+C, the menu's Copy).

        Done here rather than by overriding ``createMimeDataFromSelection``: a QMimeData made in
        Python and handed to the clipboard was freed twice at exit (a segfault after the tests).
        """
        self._actions.copy_selection()

    def context_menu(self, pos: QPoint) -> QMenu:
        """The menu at a viewport position: Qt's own (its Copy giving clean text) plus the message's actions."""
        return self._actions.context_menu(pos)

    def message_actions(self, index: int | None) -> list[QAction]:
        """Copy / regenerate / edit actions for the message at ``index``."""
        return self._actions.message_actions(index)

    def race_action(self, index: int) -> QAction:
        """Race plain decoding on the reply at ``index``, or replay its stored race."""
        return self._actions.race_action(index)

    # -- Qt events ---------------------------------------------------------------------

    def resizeEvent(self, event: QResizeEvent) -> None:
        side = column_margin(self.width() - self.verticalScrollBar().sizeHint().width())
        if self.viewportMargins().left() != side:
            self.setViewportMargins(side, 0, side, 0)
        super().resizeEvent(event)
        self._scroll.place_jump()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - a Qt override
        painter = QPainter(self.viewport())
        paint_cards(self, painter, event.rect())  # under the text: the document draws no rounded backgrounds
        painter.end()
        super().paintEvent(event)

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - a Qt override
        # On its first show Qt scrolls to the text cursor (the top of the page after a redraw): a view that
        # followed the end, as a conversation reopened at start does, stays at the end.
        following = self._scroll.follow
        super().showEvent(event)
        if following and not self._scroll.follow:
            self._scroll.jump_to_latest()

    def viewportEvent(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            help_event = cast(QHelpEvent, event)
            tip = format_at(self, help_event.pos()).toolTip()
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
        elif event.type() == QEvent.Type.Leave and not self.hover_bar.geometry().contains(
            self.viewport().mapFromGlobal(QCursor.pos())
        ):
            self.hide_hover()
        return super().viewportEvent(event)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self.redraw()

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        pos = event.position().toPoint()
        # Asked before the release is handled: a link (a version arrow) may redraw the page under the mouse,
        # and what is there afterwards (another reply's token) was never clicked.
        on_link = bool(self.anchorAt(pos))
        revision = self.document().revision()
        super().mouseReleaseEvent(event)
        if (
            event.button() is Qt.MouseButton.LeftButton
            and not on_link
            and self.document().revision() == revision
            and not self.textCursor().hasSelection()
        ):
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

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        menu = self.context_menu(event.pos())
        menu.exec(event.globalPos())
        menu.deleteLater()


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
