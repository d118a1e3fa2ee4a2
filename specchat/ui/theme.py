"""Light and dark themes that really change the window, and the text zoom.

Qt 6.8+ can ask the platform for a colour scheme, but X11 without a platform
theme (and some Windows and macOS setups) ignores it; so light and dark set
their own palette on the Fusion style, which every platform has. "system"
goes back to the style and palette the app started with.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory

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
        app.setStyle(QStyleFactory.create("Fusion"))
        app.setPalette(palette_for(theme))
        if setter is not None:
            setter(Qt.ColorScheme.Dark if theme == "dark" else Qt.ColorScheme.Light)
    else:
        style, palette = _started_with
        app.setStyle(QStyleFactory.create(style) or QStyleFactory.create("Fusion"))
        app.setPalette(palette)
        if setter is not None:
            setter(Qt.ColorScheme.Unknown)


def clamp_zoom(steps: int) -> int:
    """Zoom steps (one point each) within what stays readable."""
    return max(ZOOM_MIN, min(ZOOM_MAX, steps))
