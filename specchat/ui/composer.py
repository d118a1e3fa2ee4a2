"""The message box: Enter sends, Shift+Enter starts a new line; files dropped or pasted on it are attached."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDragMoveEvent, QDropEvent, QKeyEvent
from PySide6.QtWidgets import QPlainTextEdit, QWidget


def local_files(mime: QMimeData) -> list[str]:
    """The local files a drag or a copy carries (a file manager's copy puts their urls on the clipboard)."""
    if not mime.hasUrls():
        return []
    return [url.toLocalFile() for url in mime.urls() if url.isLocalFile() and url.toLocalFile()]


class Composer(QPlainTextEdit):
    """Multi-line input that emits ``send_requested`` with its text on Enter (text kept until taken).

    Files dropped on it or pasted into it (copied in a file manager) are not inserted as text: they go out as
    ``files_given`` to be attached.
    """

    send_requested = Signal(str)
    stop_requested = Signal()  # Esc (the window also has an Esc shortcut for when focus is elsewhere)
    files_given = Signal(list)  # local paths dropped or pasted

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setPlaceholderText("Message (Enter sends, Shift+Enter for a new line, Esc stops; drop or paste files)")
        self.setTabChangesFocus(True)
        self.setMaximumHeight(120)
        self.has_files: Callable[[], bool] = lambda: False  # files attached: Enter sends even without text

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
        if (text or self.has_files()) and self.isEnabled():
            self.send_requested.emit(text)

    # -- files dropped or pasted -------------------------------------------------------

    def canInsertFromMimeData(self, source: QMimeData) -> bool:  # noqa: N802 - a Qt override
        return bool(local_files(source)) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 - a Qt override
        files = local_files(source)
        if files:
            self.files_given.emit(files)
        else:
            super().insertFromMimeData(source)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - a Qt override
        if local_files(event.mimeData()):
            event.acceptProposedAction()
        else:
            super().dragEnterEvent(event)

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:  # noqa: N802 - a Qt override
        if local_files(event.mimeData()):
            event.acceptProposedAction()
        else:
            super().dragMoveEvent(event)

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - a Qt override
        files = local_files(event.mimeData())
        if files:
            event.acceptProposedAction()
            self.files_given.emit(files)
        else:
            super().dropEvent(event)
