"""The window's look in one place: the type scale, spacing, the palette-aware style sheet and the icons.

:func:`apply_design` runs after every theme change (``theme.apply_theme``): it sets the base font, a style
sheet whose colours come from the palette just set, and draws every icon given by :func:`set_icon` again in
the new colours. Widgets opt in by object name (the composer's frame, the send button, the composer's tool
buttons, the side panels' boxes); the rest keep the style's own look at the base size.

The chat view's turns (chat_cards.py) take their colours from :func:`card_colour` and their sizes from here.
"""

from __future__ import annotations

import os

from PySide6.QtCore import QObject
from PySide6.QtGui import QColor, QFont, QIcon, QPalette
from PySide6.QtWidgets import QAbstractButton, QApplication, QWidget

os.environ.setdefault("QT_API", "pyside6")  # qtawesome draws through QtPy: the same binding as the app
import qtawesome  # after QT_API is chosen

# -- type scale (points) ------------------------------------------------------------------

BASE_PT = 10.0
"""Buttons, labels, lists: a step above Qt's usual 9 points (the side panels still fit a 900-pixel window)."""
READING_PT = 11.5
"""The conversation and the message box: what is read and written at length."""
SMALL_PT = 9.0
"""Secondary text: the legend, the context meter, captions."""
HEADING_PT = 17.0
"""The one heading of a page (the welcome page's)."""

# -- spacing and shape (pixels) -------------------------------------------------------------

SPACE = 8
"""The unit of spacing: gaps between controls; margins are one or two of it."""
RADIUS = 8
"""Corners of buttons and boxes."""
COMPOSER_RADIUS = 12
CARD_RADIUS = 12
CARD_PAD_X = 14
"""Space inside a user's turn, left and right of its text."""
CARD_PAD_Y = 10
"""Space inside a user's turn, above its role line and below its text."""
TURN_GAP = 18
"""Space between one turn and the next."""
COLUMN_MAX = 880
"""The widest the conversation's column grows; a wider window centres it."""
FORM_SPACING = 6
"""Between the rows of the settings panel's forms."""

# -- named parts (object names the style sheet styles) ---------------------------------------

COMPOSER_FRAME = "composerFrame"
COMPOSER_BOX = "composer"
COMPOSER_TOOL = "composerTool"
SEND_BUTTON = "sendButton"
PRIMARY_BUTTON = "primaryButton"
CHAT_PAGE = "chatPage"
SECONDARY_TEXT = "secondaryText"

_ICON_PROPERTY = "designIcon"  # a widget's icon name, so a theme change draws it again
_ICON_ROLE_PROPERTY = "designIconRole"


def blend(under: QColor, over: QColor, alpha: float) -> QColor:
    """``over`` laid on ``under`` at opacity ``alpha``, as an opaque colour."""
    return QColor(
        round(under.red() + (over.red() - under.red()) * alpha),
        round(under.green() + (over.green() - under.green()) * alpha),
        round(under.blue() + (over.blue() - under.blue()) * alpha),
    )


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Base).lightness() < 128


def card_colour(palette: QPalette) -> QColor:
    """The background of a user's turn: the page tinted toward the accent."""
    base, accent = palette.color(QPalette.ColorRole.Base), palette.color(QPalette.ColorRole.Highlight)
    return blend(base, accent, 0.16 if is_dark(palette) else 0.08)


def hover_colour(palette: QPalette) -> QColor:
    """Behind a flat button under the mouse."""
    base, text = palette.color(QPalette.ColorRole.Base), palette.color(QPalette.ColorRole.Text)
    return blend(base, text, 0.10 if is_dark(palette) else 0.07)


def font(points: float, weight: QFont.Weight = QFont.Weight.Normal) -> QFont:
    """The application's font at ``points``."""
    f = QFont(QApplication.font())
    f.setPointSizeF(points)
    f.setWeight(weight)
    return f


def set_font_size(widget: QWidget, points: float, weight: QFont.Weight = QFont.Weight.Normal) -> None:
    """Give ``widget`` (and what it holds) the type scale's ``points``."""
    f = QFont(widget.font())
    f.setPointSizeF(points)
    f.setWeight(weight)
    widget.setFont(f)


def icon(name: str, palette: QPalette, role: QPalette.ColorRole = QPalette.ColorRole.ButtonText) -> QIcon:
    """The Phosphor icon ``name`` ("paperclip") in the palette's ``role`` colour, greyed when disabled."""
    drawn: QIcon = qtawesome.icon(
        f"ph.{name}",
        color=palette.color(role),
        color_disabled=palette.color(QPalette.ColorRole.PlaceholderText),
        color_active=palette.color(role),
    )
    return drawn


def set_icon(button: QAbstractButton, name: str, role: QPalette.ColorRole = QPalette.ColorRole.ButtonText) -> None:
    """Give ``button`` the icon ``name``; it is drawn again in the new colours when the theme changes."""
    button.setProperty(_ICON_PROPERTY, name)
    button.setProperty(_ICON_ROLE_PROPERTY, int(role.value))
    button.setIcon(icon(name, QApplication.palette(), role))


def icon_name(button: QObject) -> str:
    """The icon :func:`set_icon` gave ``button`` ("" for none)."""
    value = button.property(_ICON_PROPERTY)
    return value if isinstance(value, str) else ""


def refresh_icons(app: QApplication) -> None:
    """Draw every icon given by :func:`set_icon` again from the application's palette."""
    palette = app.palette()
    for widget in app.allWidgets():
        name = icon_name(widget)
        if name and isinstance(widget, QAbstractButton):
            role = QPalette.ColorRole(int(widget.property(_ICON_ROLE_PROPERTY) or 0))
            widget.setIcon(icon(name, palette, role))


def style_sheet(palette: QPalette) -> str:
    """The style sheet of the named parts, in ``palette``'s colours."""

    def c(role: QPalette.ColorRole) -> str:
        return palette.color(role).name()

    r = QPalette.ColorRole
    accent = palette.color(r.Highlight)
    dark = is_dark(palette)
    accent_hover = accent.lighter(112) if dark else accent.darker(110)
    hover = hover_colour(palette).name()
    field = c(r.Base)
    return f"""
QWidget#{CHAT_PAGE} {{ background: {c(r.Base)}; }}
QFrame#{COMPOSER_FRAME} {{
    background: {field}; border: 1px solid {c(r.Mid)}; border-radius: {COMPOSER_RADIUS}px;
}}
QFrame#{COMPOSER_FRAME}[focused="true"] {{ border: 1px solid {accent.name()}; }}
QPlainTextEdit#{COMPOSER_BOX} {{ background: transparent; border: none; }}
QToolButton#{COMPOSER_TOOL} {{
    border: none; border-radius: {RADIUS - 2}px; padding: 4px 8px; color: {c(r.ButtonText)};
}}
QToolButton#{COMPOSER_TOOL}:hover {{ background: {hover}; }}
QToolButton#{COMPOSER_TOOL}:disabled {{ color: {c(r.PlaceholderText)}; }}
QPushButton#{SEND_BUTTON}, QPushButton#{PRIMARY_BUTTON} {{
    background: {accent.name()}; color: {c(r.HighlightedText)}; border: none;
    border-radius: {RADIUS}px; padding: 6px 14px; font-weight: 600;
}}
QPushButton#{SEND_BUTTON}:hover, QPushButton#{PRIMARY_BUTTON}:hover {{ background: {accent_hover.name()}; }}
QPushButton#{SEND_BUTTON}:disabled, QPushButton#{PRIMARY_BUTTON}:disabled {{
    background: {c(r.Mid)}; color: {c(r.PlaceholderText)};
}}
QLabel#{SECONDARY_TEXT} {{ color: {c(r.PlaceholderText)}; }}
"""


def use_base_font(app: QApplication) -> None:
    """Make the base size the application's font: before the window's widgets are made, as Qt gives a new
    application font only to widgets made after it."""
    base = QFont(app.font())
    if base.pointSizeF() != BASE_PT:
        base.setPointSizeF(BASE_PT)
        app.setFont(base)


def apply_design(app: QApplication) -> None:
    """Set the base font and the style sheet from the application's palette; draw the icons again."""
    use_base_font(app)
    sheet = style_sheet(app.palette())
    if app.styleSheet() != sheet:
        app.setStyleSheet(sheet)
    refresh_icons(app)
