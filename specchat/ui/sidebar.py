"""The conversations list: grouped by day under section headers (Pinned first), each with its date;
new, rename, pin, duplicate, branch, delete, search."""

from __future__ import annotations

import datetime as dt
import html
import time
from collections import Counter
from collections.abc import Callable
from typing import Protocol

from PySide6.QtCore import QEvent, QModelIndex, QPersistentModelIndex, QPoint, QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QFont, QFontMetrics, QHelpEvent, QKeyEvent, QPainter, QPalette, QTextDocument
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QSizePolicy,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolButton,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from specchat.core.chat.dates import PINNED, day_group, full_when, short_when
from specchat.core.chat.store import ConversationInfo

from . import design

HIT = ("\ue000", "\ue001")  # around each matched word in a snippet (private-use characters: never typed)
SNIPPET_ROLE = Qt.ItemDataRole.UserRole + 1  # the search snippet shown under the title, as HTML
SNIPPET_INDENT = 8  # pixels the snippet is set in under its title
WHEN_ROLE = Qt.ItemDataRole.UserRole + 2  # "14:32", "Yesterday", "Mon", "3 Nov": right of the title
HEADER_ROLE = Qt.ItemDataRole.UserRole + 3  # the day group's name, drawn above its first shown conversation
GROUP_ROLE = Qt.ItemDataRole.UserRole + 4  # the day group the conversation is in
DATES_ROLE = Qt.ItemDataRole.UserRole + 5  # its last change and its start in full (the date's tooltip)
PINNED_ROLE = Qt.ItemDataRole.UserRole + 6
PAD = 6  # pixels left and right of a row's text


class Searcher(Protocol):
    """``ConversationStore.search``: (id, title, snippet) of each conversation that matches."""

    def __call__(self, text: str, mark: tuple[str, str] = ...) -> list[tuple[int, str, str]]: ...


def snippet_html(snippet: str) -> str:
    """A snippet with its matched words (between :data:`HIT`'s marks) bold on a highlight."""
    marked = html.escape(snippet).replace(HIT[0], "<b style='background-color: rgba(255, 200, 0, 110)'>")
    return marked.replace(HIT[1], "</b>")


def elide_words(text: str, metrics: QFontMetrics, width: int) -> str:
    """``text`` if it fits in ``width`` pixels, else its first words that fit and "…" (a word longer than the
    whole width is cut inside it, as nothing else fits)."""
    if metrics.horizontalAdvance(text) <= width:
        return text
    words = text.removesuffix("\u2026").split(" ")
    while len(words) > 1:
        words.pop()
        head = " ".join(words).rstrip(" ,;:.-")
        if metrics.horizontalAdvance(head + "\u2026") <= width:
            return head + "\u2026"
    return metrics.elidedText(text, Qt.TextElideMode.ElideRight, width)


def header_font(font: QFont) -> QFont:
    """The day groups' headers: the list's font, smaller and bold."""
    small = QFont(font)
    small.setPointSizeF(max(6.0, font.pointSizeF() * 0.85))
    small.setBold(True)
    return small


class ConversationDelegate(QStyledItemDelegate):
    """Draws a conversation's row: its day group's header above the first of the group, the title (cut at a
    word) with its date on the right, and while searching the matched text under it with the words marked."""

    def __init__(self, view: QListWidget) -> None:
        super().__init__(view)
        self.view = view

    def _document(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QTextDocument:
        doc = QTextDocument()
        doc.setDefaultFont(option.font)
        doc.setDocumentMargin(0)
        doc.setTextWidth(max(40, self.view.viewport().width() - 2 * SNIPPET_INDENT))
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.PlaceholderText
        color = option.palette.color(role).name()
        doc.setHtml(f"<span style='color: {color}'>{index.data(SNIPPET_ROLE)}</span>")
        return doc

    @staticmethod
    def header_height(option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> int:
        return QFontMetrics(header_font(option.font)).height() + 10 if index.data(HEADER_ROLE) else 0

    @staticmethod
    def line_height(option: QStyleOptionViewItem) -> int:
        return option.fontMetrics.height() + 8

    def row_rect(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QRect:
        """The part of the item's rectangle that is the conversation (below its group's header, if any)."""
        return option.rect.adjusted(0, self.header_height(option, index), 0, 0)

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        header = index.data(HEADER_ROLE)
        painter.save()
        if header:
            font = header_font(option.font)
            painter.setFont(font)
            painter.setPen(option.palette.color(QPalette.ColorRole.PlaceholderText))
            band = QRect(
                option.rect.left() + PAD,
                option.rect.top() + 4,
                option.rect.width() - 2 * PAD,
                QFontMetrics(font).height() + 4,
            )
            painter.drawText(band, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, str(header))
        opt.rect = self.row_rect(option, index)
        title, opt.text = opt.text, ""
        style = opt.widget.style() if opt.widget is not None else None
        if style is not None:  # the row's background (selected or not), without text
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        metrics = option.fontMetrics
        line = QRect(opt.rect.left() + PAD, opt.rect.top(), opt.rect.width() - 2 * PAD, self.line_height(option))
        when = str(index.data(WHEN_ROLE) or "")
        when_width = metrics.horizontalAdvance(when) + PAD if when else 0
        painter.setFont(option.font)
        muted = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.PlaceholderText
        painter.setPen(option.palette.color(muted))
        painter.drawText(line, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, when)
        painter.setPen(
            option.palette.color(QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text)
        )
        shown = elide_words(title, metrics, max(10, line.width() - when_width))
        painter.drawText(
            line.adjusted(0, 0, -when_width, 0), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, shown
        )
        if index.data(SNIPPET_ROLE):
            painter.translate(opt.rect.left() + SNIPPET_INDENT, line.bottom() + 1)
            self._document(option, index).drawContents(painter)
        painter.restore()

    def sizeHint(  # noqa: N802 - a Qt override
        self,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> QSize:
        size = super().sizeHint(option, index)
        height = self.header_height(option, index) + self.line_height(option)
        if index.data(SNIPPET_ROLE):
            height += int(self._document(option, index).size().height()) + 4
        size.setHeight(height)
        return size

    def updateEditorGeometry(  # noqa: N802 - a Qt override
        self, editor: QWidget, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        """Renaming edits the title's line, not the header above it."""
        row = self.row_rect(option, index)
        editor.setGeometry(row.left(), row.top(), row.width(), self.line_height(option))

    def helpEvent(  # noqa: N802 - a Qt override
        self,
        event: QHelpEvent,
        view: QAbstractItemView,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> bool:
        """Out of a search, a row's tooltip is its whole title and its dates in full."""
        if event.type() == QEvent.Type.ToolTip and index.isValid() and not index.data(Qt.ItemDataRole.ToolTipRole):
            QToolTip.showText(event.globalPos(), f"{index.data()}\n{index.data(DATES_ROLE)}", view)
            return True
        return super().helpEvent(event, view, option, index)


class SearchField(QLineEdit):
    """The search text; Esc clears it (before the window's Esc shortcut, which stops a reply, sees the key)."""

    def event(self, event: QEvent) -> bool:
        if (
            event.type() == QEvent.Type.ShortcutOverride
            and isinstance(event, QKeyEvent)
            and event.key() == Qt.Key.Key_Escape
            and self.text()
        ):
            event.accept()  # the key comes to keyPressEvent rather than to a shortcut
            return True
        return super().event(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape and self.text():
            self.clear()
            return
        super().keyPressEvent(event)


class ConversationSidebar(QWidget):
    """Lists conversations under day groups; emits ids. Renaming edits the item in place."""

    selected = Signal(int)
    new_requested = Signal()
    rename_requested = Signal(int, str)
    delete_requested = Signal(int)
    pin_requested = Signal(int, bool)  # the conversation, and True to pin it, False to unpin it
    duplicate_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.list = QListWidget()
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setEditTriggers(QListWidget.EditTrigger.EditKeyPressed | QListWidget.EditTrigger.DoubleClicked)
        self.list.setItemDelegate(ConversationDelegate(self.list))
        self.list.setWordWrap(True)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._show_context_menu)
        # Set by the window: fills a "Branch into a new conversation from" menu with a conversation's messages.
        self.branch_menu_filler: Callable[[QMenu, int], None] | None = None
        self.new_button = QPushButton("New conversation")
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        design.set_icon(self.new_button, "note-pencil")
        self.search_field = SearchField()
        self.search_field.setPlaceholderText("Search conversations")
        self.search_field.setClearButtonEnabled(True)
        self.search_field.setToolTip("Titles and message text; Esc clears")
        self.searcher: Searcher | None = None  # set by the window: the store's search
        layout.addWidget(self.new_button)
        layout.addWidget(self.search_field)
        layout.addWidget(self.list, 1)
        # Icons alone keep the sidebar narrow enough for a 900-pixel window.
        buttons = QHBoxLayout()
        self.rename_button = QToolButton()
        self.rename_button.setText("Rename")
        self.delete_button = QToolButton()
        self.delete_button.setText("Delete…")
        design.set_icon(self.rename_button, "pencil-simple")
        design.set_icon(self.delete_button, "trash")
        for b in (self.rename_button, self.delete_button):
            b.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
            b.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonIconOnly)  # their names in the tooltips
            b.setToolTip(b.text())
            buttons.addWidget(b)
        layout.addLayout(buttons)
        self.new_button.clicked.connect(lambda *_: self.new_requested.emit())
        self.rename_button.clicked.connect(self._start_rename)
        self.delete_button.clicked.connect(self._delete)
        self.list.currentItemChanged.connect(self._current_changed)
        self.list.itemChanged.connect(self._item_changed)
        self.search_field.textChanged.connect(self._filter)
        self._filling = False
        self._listed: list[ConversationInfo] = []
        self._listed_day = dt.date.today()
        self._day_timer = QTimer(self)  # "Today" becomes "Yesterday" at midnight without waiting for a message
        self._day_timer.setInterval(60_000)
        self._day_timer.timeout.connect(self.refresh_dates)
        self._day_timer.start()

    def refresh_dates(self, now: float | None = None) -> bool:
        """Show the list again when the day has changed since it was filled (not while a title is edited);
        True when it was."""
        now = time.time() if now is None else now
        editing = self.list.state() == QAbstractItemView.State.EditingState
        if dt.date.fromtimestamp(now) == self._listed_day or editing:
            return False
        self.set_conversations(self._listed, self.current_id(), now)
        return True

    def set_conversations(
        self, conversations: list[ConversationInfo], current: int | None, now: float | None = None
    ) -> None:
        """Show ``conversations`` (pinned first, then newest first, as the store lists them) under their groups;
        a title shared by several gets its time too, so they can be told apart."""
        now = time.time() if now is None else now
        self._listed, self._listed_day = list(conversations), dt.date.fromtimestamp(now)
        shared = {title for title, n in Counter(c.title.strip() for c in conversations).items() if n > 1}
        self._filling = True
        self.list.clear()
        for info in conversations:
            item = QListWidgetItem(info.title)
            item.setData(Qt.ItemDataRole.UserRole, info.id)
            item.setData(WHEN_ROLE, short_when(info.updated, now, with_time=info.title.strip() in shared))
            item.setData(GROUP_ROLE, PINNED if info.pinned else day_group(info.updated, now))
            item.setData(PINNED_ROLE, info.pinned)
            item.setData(DATES_ROLE, f"Last message {full_when(info.updated)}; started {full_when(info.created)}")
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.list.addItem(item)
            if info.id == current:
                self.list.setCurrentItem(item)
        self._filling = False
        self._filter()

    def headers(self) -> list[tuple[str, list[str]]]:
        """The groups as shown: each header with the titles under it (for tests and screen readers alike)."""
        out: list[tuple[str, list[str]]] = []
        for row in range(self.list.count()):
            item = self.list.item(row)
            if item.isHidden():
                continue
            if item.data(HEADER_ROLE):
                out.append((str(item.data(HEADER_ROLE)), []))
            if out:
                out[-1][1].append(item.text())
        return out

    def _filter(self) -> None:
        """Show only the conversations the search text finds (titles and text), each with its snippet under
        its title (the matched words marked) and as its tooltip."""
        text = self.search_field.text()
        found = None
        if text.strip() and self.searcher is not None:
            found = {cid: snippet for cid, _title, snippet in self.searcher(text, mark=HIT)}
        filling, self._filling = self._filling, True  # a tooltip change is an itemChanged, not a rename
        try:
            for row in range(self.list.count()):
                item = self.list.item(row)
                cid = int(item.data(Qt.ItemDataRole.UserRole))
                snippet = found.get(cid, "") if found else ""
                item.setHidden(found is not None and cid not in found)
                item.setToolTip(snippet.replace(HIT[0], "").replace(HIT[1], ""))
                item.setData(SNIPPET_ROLE, snippet_html(snippet) if snippet else None)
            group = None
            for row in range(self.list.count()):  # each group's header goes above its first shown conversation
                item = self.list.item(row)
                first = not item.isHidden() and item.data(GROUP_ROLE) != group
                item.setData(HEADER_ROLE, item.data(GROUP_ROLE) if first else None)
                if not item.isHidden():
                    group = item.data(GROUP_ROLE)
        finally:
            self._filling = filling
        self.list.doItemsLayout()  # the rows' heights changed with their headers and snippets

    def current_id(self) -> int | None:
        item = self.list.currentItem()
        return None if item is None else int(item.data(Qt.ItemDataRole.UserRole))

    def _current_changed(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None) -> None:
        if item is not None and not self._filling:
            self.selected.emit(int(item.data(Qt.ItemDataRole.UserRole)))

    def _start_rename(self) -> None:
        item = self.list.currentItem()
        if item is not None:
            self.list.editItem(item)

    def _item_changed(self, item: QListWidgetItem) -> None:
        if not self._filling and item.text().strip():
            self.rename_requested.emit(int(item.data(Qt.ItemDataRole.UserRole)), item.text().strip())

    def _delete(self) -> None:
        cid = self.current_id()
        if cid is not None:
            self.delete_requested.emit(cid)

    def context_menu(self, item: QListWidgetItem) -> QMenu:
        """Rename, Pin or Unpin, Duplicate, Branch into a new conversation from a message, Delete."""
        cid = int(item.data(Qt.ItemDataRole.UserRole))
        menu = QMenu(self)
        menu.addAction("Rename", lambda: self.list.editItem(item))
        pinned = bool(item.data(PINNED_ROLE))
        pin = menu.addAction("Unpin" if pinned else "Pin to the top", lambda: self.pin_requested.emit(cid, not pinned))
        pin.setObjectName("pin")
        menu.addAction("Duplicate", lambda: self.duplicate_requested.emit(cid)).setObjectName("duplicate")
        filler = self.branch_menu_filler
        if filler is not None:
            branch = menu.addMenu("Branch into a new conversation from")
            branch.menuAction().setObjectName("branch")
            branch.aboutToShow.connect(lambda: filler(branch, cid))
        menu.addSeparator()
        menu.addAction("Delete…", lambda: self.delete_requested.emit(cid))
        return menu

    def _show_context_menu(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is not None:
            menu = self.context_menu(item)
            menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            menu.popup(self.list.viewport().mapToGlobal(pos))
