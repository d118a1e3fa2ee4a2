"""Help → Keyboard shortcuts: every shortcut of the window, read from its menu actions (so the list cannot drift)."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QMainWindow,
    QMenu,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

COMPOSER_KEYS = "In the message box: Enter sends, Shift+Enter starts a new line, Esc stops the reply."


@dataclass(frozen=True)
class Shortcut:
    """One action with keys: the menu it is in, its words, its keys as this platform writes them."""

    menu: str
    text: str
    keys: str
    action: QAction


def plain(text: str) -> str:
    """A menu text without its mnemonic marks and trailing ellipsis ("&Reload models…" -> "Reload models")."""
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&").removesuffix("…")


def _walk(menu: QMenu, path: str, out: list[Shortcut]) -> None:
    for action in menu.actions():
        sub = action.menu()
        if isinstance(sub, QMenu):
            _walk(sub, f"{path} → {plain(action.text())}", out)
        elif not action.isSeparator() and action.shortcuts():
            keys = ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in action.shortcuts())
            out.append(Shortcut(path, plain(action.text()), keys, action))


def window_shortcuts(window: QMainWindow) -> list[Shortcut]:
    """Every action of ``window``'s menus that has a key, menu by menu, in menu order."""
    out: list[Shortcut] = []
    for action in window.menuBar().actions():
        menu = action.menu()
        if isinstance(menu, QMenu):
            _walk(menu, plain(action.text()), out)
    return out


class ShortcutsDialog(QDialog):
    """The shortcuts as a two-column list (action, keys) under each menu's name."""

    def __init__(self, window: QMainWindow, parent: QWidget | None = None) -> None:
        super().__init__(parent or window)
        self.setWindowTitle("Keyboard shortcuts")
        self.shortcuts = window_shortcuts(window)
        layout = QVBoxLayout(self)
        self.tree = QTreeWidget()
        self.tree.setColumnCount(2)
        self.tree.setHeaderLabels(["Action", "Keys"])
        self.tree.setRootIsDecorated(False)
        self.tree.setSelectionMode(QTreeWidget.SelectionMode.NoSelection)
        self.tree.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        group: QTreeWidgetItem | None = None
        for shortcut in self.shortcuts:
            if group is None or group.text(0) != shortcut.menu:
                group = QTreeWidgetItem(self.tree, [shortcut.menu])
                font = group.font(0)
                font.setBold(True)
                group.setFont(0, font)
                group.setFirstColumnSpanned(True)
                group.setExpanded(True)
            QTreeWidgetItem(group, [shortcut.text, shortcut.keys])
        self.tree.expandAll()
        self.tree.resizeColumnToContents(0)
        layout.addWidget(self.tree, 1)
        note = QLabel(COMPOSER_KEYS)
        note.setWordWrap(True)
        layout.addWidget(note)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.resize(max(460, self.tree.columnWidth(0) + 220), 560)

    def rows(self) -> list[tuple[str, str]]:
        """(action, keys) of each listed shortcut, as shown."""
        out: list[tuple[str, str]] = []
        for g in range(self.tree.topLevelItemCount()):
            group = self.tree.topLevelItem(g)
            children = [group.child(i) for i in range(group.childCount())] if group is not None else []
            out += [(child.text(0), child.text(1)) for child in children if child is not None]
        return out
