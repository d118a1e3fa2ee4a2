"""Light and dark themes that really change the window, and the text zoom.

Qt 6.8+ can ask the platform for a colour scheme, but X11 without a platform
theme (and some Windows and macOS setups) ignores it; so light and dark set
their own palette on the Fusion style, which every platform has. "system"
goes back to the style and palette the app started with.

Two things Fusion leaves hard to see in the dark theme are put right here: a check box's border (Fusion
draws it in the window colour darkened, near-invisible on dark grey) and widgets with a style sheet (the
depth slider's number), whose colours Qt resolves when the sheet is set and keeps through a palette
change until the sheet is applied again.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPainter, QPalette, QPen
from PySide6.QtWidgets import QApplication, QProxyStyle, QStyle, QStyleFactory, QStyleOption, QWidget

from .design import apply_design

ZOOM_MIN = -6
ZOOM_MAX = 12

_LIGHT = {
    QPalette.ColorRole.Window: "#f3f3f3",
    QPalette.ColorRole.WindowText: "#1f2328",
    QPalette.ColorRole.Base: "#ffffff",
    QPalette.ColorRole.AlternateBase: "#f6f8fa",
    QPalette.ColorRole.Text: "#1f2328",
    QPalette.ColorRole.Button: "#eaeef2",
    QPalette.ColorRole.ButtonText: "#1f2328",
    QPalette.ColorRole.Highlight: "#0969da",
    QPalette.ColorRole.HighlightedText: "#ffffff",
    QPalette.ColorRole.ToolTipBase: "#ffffff",
    QPalette.ColorRole.ToolTipText: "#1f2328",
    QPalette.ColorRole.PlaceholderText: "#6e7781",
    QPalette.ColorRole.Link: "#0969da",
    QPalette.ColorRole.Mid: "#d0d7de",
}

_DARK = {
    QPalette.ColorRole.Window: "#22272e",
    QPalette.ColorRole.WindowText: "#e6edf3",
    QPalette.ColorRole.Base: "#1c2128",
    QPalette.ColorRole.AlternateBase: "#2d333b",
    QPalette.ColorRole.Text: "#e6edf3",
    QPalette.ColorRole.Button: "#2d333b",
    QPalette.ColorRole.ButtonText: "#e6edf3",
    QPalette.ColorRole.Highlight: "#316dca",
    QPalette.ColorRole.HighlightedText: "#ffffff",
    QPalette.ColorRole.ToolTipBase: "#2d333b",
    QPalette.ColorRole.ToolTipText: "#e6edf3",
    QPalette.ColorRole.PlaceholderText: "#8b949e",
    QPalette.ColorRole.Link: "#539bf5",
    QPalette.ColorRole.Mid: "#444c56",
}

_started_with: tuple[str, QPalette] | None = None


class ThemedStyle(QProxyStyle):
    """Fusion with check box borders in the palette's placeholder colour, which stands out in either theme."""

    def drawPrimitive(  # noqa: N802 - a Qt override
        self,
        element: QStyle.PrimitiveElement,
        option: QStyleOption,
        painter: QPainter,
        widget: QWidget | None = None,
    ) -> None:
        super().drawPrimitive(element, option, painter, widget)
        if element == QStyle.PrimitiveElement.PE_IndicatorCheckBox:
            painter.save()
            painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(QPen(option.palette.color(QPalette.ColorRole.PlaceholderText), 1))
            painter.drawRect(option.rect.adjusted(0, 0, -1, -1))
            painter.restore()


def themed_style() -> QStyle:
    """The style the light and dark themes use: Fusion, its check boxes easy to see."""
    base = QStyleFactory.create("Fusion")
    return ThemedStyle(base) if base is not None else ThemedStyle()


def contrast(first: QColor, second: QColor) -> float:
    """The WCAG contrast ratio of two colours, from 1 (the same) to 21 (black on white)."""

    def luminance(c: QColor) -> float:
        def channel(v: float) -> float:
            return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

        return 0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF())

    light, dark = sorted((luminance(first), luminance(second)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def palette_for(theme: str) -> QPalette:
    """The palette of ``light`` or ``dark`` (disabled text greyed)."""
    colours = _DARK if theme == "dark" else _LIGHT
    palette = QPalette()
    for role, value in colours.items():
        palette.setColor(role, QColor(value))
    muted = QColor(colours[QPalette.ColorRole.PlaceholderText])
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, muted)
    return palette


def apply_theme(theme: str) -> None:
    """Switch the whole app to ``system``, ``light`` or ``dark``."""
    global _started_with
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        return
    if _started_with is None:
        _started_with = (app.style().name(), QPalette(app.palette()))
    hints = QGuiApplication.styleHints()
    setter = getattr(hints, "setColorScheme", None)
    if theme in ("light", "dark"):
        app.setStyle(themed_style())
        app.setPalette(palette_for(theme))
        if setter is not None:
            setter(Qt.ColorScheme.Dark if theme == "dark" else Qt.ColorScheme.Light)
    else:
        style, palette = _started_with
        app.setStyle(QStyleFactory.create(style) or QStyleFactory.create("Fusion"))
        app.setPalette(palette)
        if setter is not None:
            setter(Qt.ColorScheme.Unknown)
    for widget in app.allWidgets():  # a style sheet's colours follow the new palette only when it is set again
        sheet = widget.styleSheet()
        if sheet:
            widget.setStyleSheet(sheet)
    apply_design(app)  # the base font, and the design's style sheet and icons in the new colours


def clamp_zoom(steps: int) -> int:
    """Zoom steps (one point each) within what stays readable."""
    return max(ZOOM_MIN, min(ZOOM_MAX, steps))
