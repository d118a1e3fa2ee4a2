"""The conversations list: new, rename, delete, search."""

from __future__ import annotations

import html
from typing import Protocol

from PySide6.QtCore import QEvent, QModelIndex, QPersistentModelIndex, QSize, Qt, Signal
from PySide6.QtGui import QBrush, QKeyEvent, QPainter, QPalette, QTextDocument
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from specchat.core.chat.store import ConversationInfo

HIT = ("\ue000", "\ue001")  # around each matched word in a snippet (private-use characters: never typed)
SNIPPET_ROLE = Qt.ItemDataRole.UserRole + 1  # the search snippet shown under the title, as HTML
SNIPPET_INDENT = 8  # pixels the snippet is set in under its title


class Searcher(Protocol):
    """``ConversationStore.search``: (id, title, snippet) of each conversation that matches."""

    def __call__(self, text: str, mark: tuple[str, str] = ...) -> list[tuple[int, str, str]]: ...


def snippet_html(snippet: str) -> str:
    """A snippet with its matched words (between :data:`HIT`'s marks) bold on a highlight."""
    marked = html.escape(snippet).replace(HIT[0], "<b style='background-color: rgba(255, 200, 0, 110)'>")
    return marked.replace(HIT[1], "</b>")


class SnippetDelegate(QStyledItemDelegate):
    """Draws a conversation's title and, while searching, the matched text under it with the words marked."""

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

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        if not index.data(SNIPPET_ROLE):
            super().paint(painter, option, index)
            return
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        title_height = opt.fontMetrics.height() + 4
        style = opt.widget.style() if opt.widget is not None else None
        if style is not None:  # the item's background (selected or not) over the whole row, then the title
            text, opt.text = opt.text, ""
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)
            opt.text = text
        opt.rect.setHeight(title_height)
        opt.backgroundBrush = QBrush(Qt.BrushStyle.NoBrush)
        super().paint(painter, opt, index)
        painter.save()
        painter.translate(option.rect.left() + SNIPPET_INDENT, option.rect.top() + title_height)
        self._document(option, index).drawContents(painter)
        painter.restore()

    def sizeHint(  # noqa: N802 - a Qt override
        self,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> QSize:
        size = super().sizeHint(option, index)
        if index.data(SNIPPET_ROLE):
            snippet = int(self._document(option, index).size().height())
            size.setHeight(option.fontMetrics.height() + 4 + snippet + 4)
        return size


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
    """Lists conversations; emits ids. Renaming edits the item in place."""

    selected = Signal(int)
    new_requested = Signal()
    rename_requested = Signal(int, str)
    delete_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.list = QListWidget()
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setEditTriggers(QListWidget.EditTrigger.EditKeyPressed | QListWidget.EditTrigger.DoubleClicked)
        self.list.setItemDelegate(SnippetDelegate(self.list))
        self.list.setWordWrap(True)
        self.new_button = QPushButton("New conversation")
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.search_field = SearchField()
        self.search_field.setPlaceholderText("Search conversations")
        self.search_field.setClearButtonEnabled(True)
        self.search_field.setToolTip("Titles and message text; Esc clears")
        self.searcher: Searcher | None = None  # set by the window: the store's search
        layout.addWidget(self.new_button)
        layout.addWidget(self.search_field)
        layout.addWidget(self.list, 1)
        # Compact buttons keep the sidebar narrow enough for a 900-pixel window.
        buttons = QHBoxLayout()
        self.rename_button = QToolButton()
        self.rename_button.setText("Rename")
        self.delete_button = QToolButton()
        self.delete_button.setText("Delete…")
        for b in (self.rename_button, self.delete_button):
            b.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
            buttons.addWidget(b)
        layout.addLayout(buttons)
        self.new_button.clicked.connect(lambda *_: self.new_requested.emit())
        self.rename_button.clicked.connect(self._start_rename)
        self.delete_button.clicked.connect(self._delete)
        self.list.currentItemChanged.connect(self._current_changed)
        self.list.itemChanged.connect(self._item_changed)
        self.search_field.textChanged.connect(self._filter)
        self._filling = False

    def set_conversations(self, conversations: list[ConversationInfo], current: int | None) -> None:
        self._filling = True
        self.list.clear()
        for info in conversations:
            item = QListWidgetItem(info.title)
            item.setData(Qt.ItemDataRole.UserRole, info.id)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.list.addItem(item)
            if info.id == current:
                self.list.setCurrentItem(item)
        self._filling = False
        self._filter()

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
        finally:
            self._filling = filling

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
