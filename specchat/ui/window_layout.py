"""The main window's panels: the chat page (indicator, legend, chat, composer) and the settings panel."""

from __future__ import annotations

import math

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QMouseEvent, QPalette, QResizeEvent
from PySide6.QtWidgets import (
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from specchat.core.chat.transcript import Transcript
from specchat.core.settings import Settings

from . import design
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


WORDS_FROM = 600
"""The chat page's width from which Regenerate and Stop show their names beside their icons (narrower, the
icons alone keep the window within 900 pixels; the tooltips say what they do)."""


class ComposerFrame(QFrame):
    """The rounded frame around the message box, its files and its buttons. The box grows with its text from
    two lines to five, then scrolls (the chat keeps the room); the frame's border takes the accent colour while
    the box has the keyboard."""

    MIN_LINES, MAX_LINES = 2, 5

    def __init__(self, composer: Composer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(design.COMPOSER_FRAME)
        self.setProperty("focused", False)
        self._composer = composer
        composer.installEventFilter(self)
        composer.document().contentsChanged.connect(self.fit_height)
        self.fit_height()

    def fit_height(self) -> None:
        """The message box as tall as its text, two to five lines."""
        box = self._composer
        lines = max(self.MIN_LINES, min(self.MAX_LINES, math.ceil(box.document().size().height())))
        margins = box.contentsMargins()
        height = (
            lines * box.fontMetrics().lineSpacing()
            + round(3 * box.document().documentMargin())  # above, below, and the last line's own (Qt counts it)
            + margins.top()
            + margins.bottom()
            + 2 * box.frameWidth()
        )
        if box.height() != height or box.minimumHeight() != height:
            box.setFixedHeight(height)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - a Qt override
        if watched is self._composer:
            if event.type() in (QEvent.Type.FocusIn, QEvent.Type.FocusOut):
                self.setProperty("focused", event.type() == QEvent.Type.FocusIn)
                self.style().unpolish(self)
                self.style().polish(self)
            elif event.type() in (QEvent.Type.FontChange, QEvent.Type.Resize):  # zoomed, or the text wraps anew
                self.fit_height()
        return super().eventFilter(watched, event)


class ChatPage(QWidget):
    """The system-prompt chip, the legend, the chat view, and the composer: the message box in a rounded frame
    with its files above it and Attach, Regenerate, Stop and Send under it."""

    def __init__(self, settings: Settings, transcript: Transcript, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(design.CHAT_PAGE)
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.chat_view = ChatView(transcript=transcript)
        self.chat_view.set_hide_rejected(settings.hide_rejected)
        self.chat_view.set_show_verdicts(settings.show_verdicts)
        self.composer = Composer()
        self.composer.setObjectName(design.COMPOSER_BOX)
        for reading in (self.chat_view, self.composer):
            design.set_font_size(reading, design.READING_PT)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName(design.SEND_BUTTON)
        self.send_button.setToolTip("Send the message (Enter)")
        design.set_icon(self.send_button, "paper-plane-right-fill", QPalette.ColorRole.HighlightedText)
        self.stop_button = QToolButton()
        self.stop_button.setText("Stop")
        self.stop_button.setToolTip("Stop the reply (Esc)")
        self.stop_button.setEnabled(False)
        design.set_icon(self.stop_button, "stop-fill")
        self.regenerate_button = QToolButton()
        self.regenerate_button.setText("Regenerate")
        self.regenerate_button.setToolTip("Generate the last reply again (Ctrl+R)")
        design.set_icon(self.regenerate_button, "arrow-clockwise")
        for tool in (self.stop_button, self.regenerate_button):
            tool.setObjectName(design.COMPOSER_TOOL)
        for button in (self.send_button, self.stop_button, self.regenerate_button):
            button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.attach_button = AttachButton()
        self.attachments = AttachmentTray()
        self.context_meter = ContextMeter()
        design.set_font_size(self.context_meter, design.SMALL_PT)
        self.system_prompt_chip = SystemPromptChip()

        self.composer_frame = ComposerFrame(self.composer)
        inside = QVBoxLayout(self.composer_frame)
        inside.setContentsMargins(design.SPACE, design.SPACE // 2, design.SPACE // 2, design.SPACE // 2)
        inside.setSpacing(design.SPACE // 2)
        inside.addWidget(self.attachments)
        inside.addWidget(self.composer, 1)
        tools = QHBoxLayout()
        tools.setSpacing(design.SPACE // 2)
        tools.addWidget(self.attach_button)
        tools.addWidget(self.context_meter)
        tools.addStretch(1)
        for b in (self.regenerate_button, self.stop_button, self.send_button):
            tools.addWidget(b)
        inside.addLayout(tools)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        legend = TokenLegend(view=self.chat_view)
        legend.setWordWrap(True)  # wraps rather than widening a narrow window
        legend.setAlignment(Qt.AlignmentFlag.AlignCenter)
        legend.setContentsMargins(design.SPACE, design.SPACE // 2, design.SPACE, design.SPACE // 2)
        design.set_font_size(legend, design.SMALL_PT)
        self.legend = legend
        layout.addWidget(self.system_prompt_chip)
        layout.addWidget(legend)
        layout.addWidget(self.chat_view, 1)
        self._row = QHBoxLayout()  # the composer under the conversation's column, as wide as it
        self._row.addWidget(self.composer_frame)
        layout.addLayout(self._row)
        self._fit_row()

    def _fit_row(self) -> None:
        """The composer's row under the column; Regenerate and Stop say their names when there is room."""
        wide = self.isVisible() and self.width() >= WORDS_FROM  # the names only once shown wide enough
        side = max(design.SPACE * (2 if wide else 1), (self.width() - design.COLUMN_MAX) // 2)
        self._row.setContentsMargins(side, design.SPACE, side, design.SPACE * 2)
        style = Qt.ToolButtonStyle.ToolButtonTextBesideIcon if wide else Qt.ToolButtonStyle.ToolButtonIconOnly
        for tool in (self.regenerate_button, self.stop_button):
            tool.setToolButtonStyle(style)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_row()


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
        layout.setContentsMargins(design.SPACE, design.SPACE, design.SPACE, design.SPACE)
        layout.setSpacing(design.SPACE)
        layout.addWidget(self.model_label)
        layout.addWidget(self.presets)
        layout.addWidget(self.controls)
        layout.addWidget(self.stats, 1)
        for form in inner.findChildren(QFormLayout):
            form.setVerticalSpacing(design.FORM_SPACING)
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
