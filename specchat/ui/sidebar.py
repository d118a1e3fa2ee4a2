"""The conversations list: new, rename, delete."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from specchat.core.chat.store import ConversationInfo


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
        self.new_button = QPushButton("New conversation")
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        layout.addWidget(self.new_button)
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
