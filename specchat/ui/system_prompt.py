"""A small dialog to edit a system prompt (the conversation's, or the default for new ones)."""

from __future__ import annotations

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QVBoxLayout, QWidget


class SystemPromptDialog(QDialog):
    """Edit a system prompt; ``accepted`` means ``text()`` is the new one."""

    def __init__(self, title: str, explanation: str, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        layout = QVBoxLayout(self)
        note = QLabel(explanation)
        note.setWordWrap(True)
        layout.addWidget(note)
        self.editor = QPlainTextEdit(text)
        self.editor.setPlaceholderText("e.g. You are a concise assistant. Answer in plain English.")
        layout.addWidget(self.editor, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.resize(480, 260)

    def text(self) -> str:
        return self.editor.toPlainText().strip()
