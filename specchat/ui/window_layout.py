"""The main window's panels: the chat page (indicator, legend, chat, composer) and the settings panel."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from specchat.core.chat.transcript import Transcript
from specchat.core.settings import Settings

from .attachment_chips import AttachButton, AttachmentTray, ContextMeter
from .chat_view import ChatView, TokenLegend
from .composer import Composer
from .controls import SpeculationControls
from .presets import PresetBar
from .stats_panel import StatsPanel


class SystemPromptChip(QLabel):
    """ "System prompt: <first words>…" above the chat while the open conversation has one; a click edits it.

    A label, not a flat button with a style sheet: a style sheet fixes its colours when it is applied, and the
    dark theme then drew the light theme's dark text on dark grey.
    """

    clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip("This conversation has a system prompt: click to edit it")
        self.setContentsMargins(6, 2, 6, 2)
        self.setTextFormat(Qt.TextFormat.PlainText)  # the prompt's own "<b>" is text
        self.hide()

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton and self.rect().contains(event.position().toPoint()):
            self.clicked.emit()
        super().mouseReleaseEvent(event)

    def show_prompt(self, prompt: str) -> None:
        prompt = prompt.strip()
        self.setVisible(bool(prompt))
        if prompt:
            words = prompt.split()
            head = " ".join(words[:8])
            if len(head) > 60:
                head = head[:60].rstrip()
            more = "\u2026" if head != " ".join(words) else ""
            self.setText(f"System prompt: {head}{more}")
            self.setToolTip(f"{prompt[:500]}\n\nClick to edit this conversation's system prompt")


class ChatPage(QWidget):
    """The system-prompt chip, the legend, the chat view, and the composer with Send, Stop and Regenerate."""

    def __init__(self, settings: Settings, transcript: Transcript, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.chat_view = ChatView(transcript=transcript)
        self.chat_view.set_hide_rejected(settings.hide_rejected)
        self.chat_view.set_show_verdicts(settings.show_verdicts)
        self.composer = Composer()
        lines = self.composer.fontMetrics().lineSpacing()
        self.composer.setMaximumHeight(lines * 5 + 16)  # grows to five lines, then scrolls: the chat keeps the room
        self.send_button = QPushButton("Send")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the reply (Esc)")
        self.stop_button.setEnabled(False)
        self.regenerate_button = QPushButton("Regenerate")
        self.regenerate_button.setToolTip("Generate the last reply again (Ctrl+R)")
        self.attach_button = AttachButton()
        self.attachments = AttachmentTray()
        self.context_meter = ContextMeter()
        self.system_prompt_chip = SystemPromptChip()

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        legend = TokenLegend(view=self.chat_view)
        legend.setWordWrap(True)  # wraps rather than widening a narrow window
        layout.addWidget(self.system_prompt_chip)
        layout.addWidget(legend)
        layout.addWidget(self.chat_view, 1)
        files = QHBoxLayout()
        files.addWidget(self.attachments)
        files.addStretch(1)
        files.addWidget(self.context_meter)
        layout.addLayout(files)
        row = QHBoxLayout()
        row.addWidget(self.attach_button, 0, Qt.AlignmentFlag.AlignTop)
        row.addWidget(self.composer, 1)
        buttons = QVBoxLayout()
        for b in (self.send_button, self.stop_button, self.regenerate_button):
            buttons.addWidget(b)
        row.addLayout(buttons)
        layout.addLayout(row)


class SettingsPanel(QScrollArea):
    """The loaded pair, the speculation controls and the stats; scrolls rather than squeezing its rows
    when the window is small (900x600 and below)."""

    def __init__(self, settings: Settings, *, offload: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model_label = QLabel("No models loaded")
        self.model_label.setWordWrap(True)
        self.presets = PresetBar()
        self.controls = SpeculationControls(settings, offload=offload)
        self.stats = StatsPanel()
        self.stats.measure_button.setEnabled(False)  # until a pair is loaded
        inner = QWidget()
        layout = QVBoxLayout(inner)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.model_label)
        layout.addWidget(self.presets)
        layout.addWidget(self.controls)
        layout.addWidget(self.stats, 1)
        self.setWidget(inner)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.fit_width()
        inner.installEventFilter(self)

    def fit_width(self) -> None:
        """At least as wide as the contents need beside the scroll bar: with a narrower panel they would sit under
        the bar (the figures and the preset bar grow after a reply, a theme changes the style's metrics)."""
        inner = self.widget()
        if inner is None:
            return
        need = inner.minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width() + 2 * self.frameWidth()
        if need != self.minimumWidth():
            self.setMinimumWidth(need)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - a Qt override
        if watched is self.widget() and event.type() in (QEvent.Type.LayoutRequest, QEvent.Type.StyleChange):
            self.fit_width()
        return super().eventFilter(watched, event)

    def show_pair(self, target: str, draft: str) -> None:
        self.model_label.setText(f"<b>Target</b> {target}<br><b>Draft</b> {draft}")

    def show_none(self) -> None:
        self.model_label.setText("No models loaded")
        self.stats.clear_placement()
