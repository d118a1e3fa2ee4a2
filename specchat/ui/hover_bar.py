"""The hover actions over a message: a small floating bar of buttons (Copy, Regenerate, Edit, Race), and where
it goes: over the message's header line, right-aligned, never over its text."""

from __future__ import annotations

from typing import cast

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QTextBlock
from PySide6.QtWidgets import QFrame, QHBoxLayout, QToolButton, QWidget

from . import design
from .token_styles import PROP_MESSAGE


def block_message(block: QTextBlock) -> int | None:
    """The message index of a block's first fragment that has one."""
    it = block.begin()
    while not it.atEnd():
        value = it.fragment().charFormat().property(PROP_MESSAGE)
        if value is not None:
            return int(value)
        it += 1
    return None


def header_bottom_of(block: QTextBlock, index: int) -> int:
    """The document y of the bottom of message ``index``'s header line, walking back from ``block``."""
    first = block
    while block.isValid():
        owner = block_message(block)
        if owner is not None and owner != index:
            break
        if owner == index:
            first = block
        block = block.previous()
    layout = first.layout()
    if layout is None or layout.lineCount() == 0:
        return 0
    return int(layout.position().y() + layout.lineAt(0).rect().bottom())


class HoverBar(QFrame):
    """A small floating row of buttons over the hovered message, each triggering one of its actions."""

    LABELS = {"copy": "Copy", "regenerate": "Regenerate", "edit": "Edit", "race": "Race"}
    ICONS = {"copy": "copy", "regenerate": "arrow-clockwise", "edit": "pencil-simple", "race": "flag"}

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.setCursor(Qt.CursorShape.ArrowCursor)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.setSpacing(2)
        self.buttons: dict[str, QToolButton] = {}
        self._actions: list[QAction] = []

    def set_actions(self, actions: list[QAction]) -> None:
        """Replace the buttons with one per action (the actions become the bar's)."""
        for button in self.buttons.values():
            button.deleteLater()
        for old in self._actions:
            old.deleteLater()
        self.buttons = {}
        self._actions = list(actions)
        layout = cast(QHBoxLayout, self.layout())
        for action in actions:
            action.setParent(self)
            button = QToolButton(self)
            button.setText(self.LABELS.get(action.objectName(), action.text()))
            button.setToolTip(action.toolTip() or action.text())
            button.setEnabled(action.isEnabled())
            button.setAutoRaise(True)
            if action.objectName() in self.ICONS:
                design.set_icon(button, self.ICONS[action.objectName()])
                button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
            button.clicked.connect(action.trigger)
            layout.addWidget(button)
            self.buttons[action.objectName()] = button
        self.adjustSize()
