"""Contrast as drawn: WCAG's ratio between a widget's background and its most legible pixel."""

from __future__ import annotations

from PySide6.QtGui import QColor
from PySide6.QtWidgets import QWidget


def _luminance(c: QColor) -> float:
    def lin(v: float) -> float:
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    return 0.2126 * lin(c.redF()) + 0.7152 * lin(c.greenF()) + 0.0722 * lin(c.blueF())


def contrast(a: QColor, b: QColor) -> float:
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def drawn_contrast(widget: QWidget) -> tuple[QColor, float]:
    """The most common colour of the widget as drawn (its background) and the best contrast any pixel has on it."""
    image = widget.grab().toImage()
    counts: dict[int, int] = {}
    for y in range(image.height()):
        for x in range(image.width()):
            rgb = image.pixel(x, y)
            counts[rgb] = counts.get(rgb, 0) + 1
    background = QColor.fromRgb(max(counts, key=lambda k: counts[k]))
    return background, max(contrast(QColor.fromRgb(rgb), background) for rgb in counts)
