"""The error banner above the chat, drawn from the current palette so it reads in light and dark alike.

A style sheet would fix its colours when it is first polished (black text stayed
on the dark theme's grey); this label paints its tinted background and border
from whatever palette the window has now.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QLabel, QWidget

ERROR_TINT = QColor("#d1242f")


def mix(a: QColor, b: QColor, amount: float) -> QColor:
    """``a`` moved ``amount`` (0..1) of the way towards ``b``."""
    return QColor.fromRgbF(
        a.redF() + (b.redF() - a.redF()) * amount,
        a.greenF() + (b.greenF() - a.greenF()) * amount,
        a.blueF() + (b.blueF() - a.blueF()) * amount,
    )


class ErrorBanner(QLabel):
    """One line (or a wrapped few) saying what went wrong; its colours follow the palette."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("", parent)
        self.setWordWrap(True)
        self.setMargin(5)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setForegroundRole(QPalette.ColorRole.WindowText)

    def background(self) -> QColor:
        return mix(self.palette().color(QPalette.ColorRole.Base), ERROR_TINT, 0.14)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - a Qt override
        painter = QPainter(self)
        painter.fillRect(self.rect(), self.background())
        painter.setPen(QPen(mix(self.palette().color(QPalette.ColorRole.Mid), ERROR_TINT, 0.6), 1))
        painter.drawRect(self.rect().adjusted(0, 0, -1, -1))
        painter.end()
        super().paintEvent(event)
