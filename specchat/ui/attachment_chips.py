"""Attachments as the window shows them: a chip per file (name, size, tokens), its text in a preview, the tray of
chips above the composer, and the context meter beside it."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont, QPalette
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from specchat.core.chat.attachments import Attachment, estimate_tokens
from specchat.core.chat.documents import human_size

from . import design


class AttachmentPreview(QDialog):
    """A file's extracted text, read-only: what the model will read of it."""

    def __init__(self, attachment: Attachment, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(attachment.name)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.resize(640, 480)
        tokens = attachment.tokens if attachment.tokens is not None else estimate_tokens(attachment.text)
        about = "" if attachment.tokens is not None else "about "
        cut = f"; cut to fit the context: {attachment.note}" if attachment.note else ""
        self.summary = QLabel(
            f"{human_size(attachment.size)} on disk, {len(attachment.text):,} characters of text, "
            f"{about}{tokens:,} tokens{cut}. This is the text the model reads."
        )
        self.summary.setWordWrap(True)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setPlainText(attachment.text.replace("\f", "\n"))
        self.text.setFont(QFont("monospace"))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.text, 1)
        layout.addWidget(buttons)


def show_preview(attachment: Attachment, parent: QWidget | None) -> AttachmentPreview:
    """Open the preview of ``attachment`` (window-modal, not blocking) and return it."""
    dialog = AttachmentPreview(attachment, parent)
    dialog.open()
    return dialog


class AttachmentChip(QFrame):
    """One attached file: its name, size and tokens (a click previews its text) and, before sending, an ×."""

    preview_requested = Signal()
    remove_requested = Signal()

    def __init__(self, attachment: Attachment, *, removable: bool = True, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.attachment = attachment
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.setBackgroundRole(QPalette.ColorRole.AlternateBase)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 1, 2, 1)
        layout.setSpacing(2)
        self.name = QToolButton()
        self.name.setAutoRaise(True)
        self.name.setText(attachment.label)
        self.name.setCursor(Qt.CursorShape.PointingHandCursor)
        self.name.setToolTip(
            "Click to see the text the model reads"
            + (f"\nCut to fit the context: {attachment.note}" if attachment.note else "")
        )
        self.name.clicked.connect(self.preview_requested)
        layout.addWidget(self.name)
        self.remove = QToolButton()
        self.remove.setAutoRaise(True)
        self.remove.setText("\u00d7")
        self.remove.setToolTip(f"Remove {attachment.name} from this message")
        self.remove.clicked.connect(self.remove_requested)
        self.remove.setVisible(removable)
        layout.addWidget(self.remove)


class AttachmentTray(QWidget):
    """The chips of the files attached to the message being written; hidden while there are none."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.attachments: list[Attachment] = []
        self.chips: list[AttachmentChip] = []
        self._layout = QHBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.addStretch(1)
        self.hide()

    def add(self, attachment: Attachment) -> None:
        self.set_all([*self.attachments, attachment])

    def remove_at(self, index: int) -> None:
        if 0 <= index < len(self.attachments):
            self.set_all(self.attachments[:index] + self.attachments[index + 1 :])

    def replace_at(self, index: int, attachment: Attachment) -> None:
        """Put ``attachment`` in place of the one at ``index`` (its count arrived, or it was cut to fit)."""
        if 0 <= index < len(self.attachments):
            self.set_all([*self.attachments[:index], attachment, *self.attachments[index + 1 :]])

    def clear(self) -> None:
        self.set_all([])

    def set_all(self, attachments: list[Attachment]) -> None:
        """Show exactly ``attachments``, one chip each."""
        for chip in self.chips:
            self._layout.removeWidget(chip)
            chip.deleteLater()
        self.attachments = list(attachments)
        self.chips = []
        for i, attachment in enumerate(self.attachments):
            chip = AttachmentChip(attachment)
            chip.preview_requested.connect(lambda a=attachment: show_preview(a, self.window()))
            chip.remove_requested.connect(lambda i=i: self.remove_at(i))
            self._layout.insertWidget(i, chip)
            self.chips.append(chip)
        self.setVisible(bool(self.attachments))
        self.changed.emit()


class ContextMeter(QLabel):
    """ "1,240 / 8,192 tokens": the prompt the next reply reads (the conversation, its attachments and the
    message being written) against the context size; "about" while no model counted it, a warning when over."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.used = 0
        self.n_ctx = 0
        self.estimated = True
        self.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.show_count(0, 0, estimated=True)

    @property
    def over(self) -> bool:
        return self.n_ctx > 0 and self.used >= self.n_ctx

    def show_count(self, used: int, n_ctx: int, *, estimated: bool) -> None:
        self.used, self.n_ctx, self.estimated = used, n_ctx, estimated
        about = "about " if estimated else ""
        self.setText(f"{about}{used:,} / {n_ctx:,} tokens" if n_ctx else f"{about}{used:,} tokens")
        how = (
            "estimated at about 4 characters a token (load a model to count exactly)"
            if estimated
            else "counted with the loaded target's tokenizer"
        )
        self.setToolTip(
            f"The prompt the next reply reads: the conversation, its attachments and this message, {how}. "
            f"The context holds {n_ctx:,} tokens."
            + (" This does not fit: remove or cut something." if self.over else "")
        )
        palette = QPalette()  # no roles set: the theme's, as the parent has it
        if self.over:
            palette = QPalette(self.palette())
            palette.setColor(QPalette.ColorRole.WindowText, Qt.GlobalColor.red)
        self.setPalette(palette)


class AttachButton(QToolButton):
    """The paperclip in the composer; its icon follows the theme (design.py)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(design.COMPOSER_TOOL)
        self.setAccessibleName("Attach files")
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip(
            "Attach files to this message: text, Markdown, code, CSV, JSON, HTML, PDF, Word "
            "(or drop them on the chat, or paste them)"
        )
        design.set_icon(self, "paperclip")
