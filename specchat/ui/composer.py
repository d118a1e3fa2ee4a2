"""The message box: Enter sends, Shift+Enter starts a new line."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QPlainTextEdit, QWidget


class Composer(QPlainTextEdit):
    """Multi-line input that emits ``send_requested`` with its text on Enter (text kept until taken)."""

    send_requested = Signal(str)
    stop_requested = Signal()  # Esc (the window also has an Esc shortcut for when focus is elsewhere)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setPlaceholderText("Message (Enter sends, Shift+Enter for a new line, Esc stops)")
        self.setTabChangesFocus(True)
        self.setMaximumHeight(120)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape:
            self.stop_requested.emit()
            return
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
            event.modifiers() & Qt.KeyboardModifier.ShiftModifier
        ):
            self.send()
            return
        super().keyPressEvent(event)

    def send(self) -> None:
        """Emit the text; the receiver clears the box once it has taken the message."""
        text = self.toPlainText().strip()
        if text and self.isEnabled():
            self.send_requested.emit(text)
