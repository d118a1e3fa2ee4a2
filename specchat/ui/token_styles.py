"""Character formats for each token kind, from the current palette.

Each kind differs by more than hue (colour-blind safe): pending is italic,
accepted is underlined, rejected is struck through, target is bold.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QPalette, QTextCharFormat, QTextFormat

from specchat.core.chat.store import TokenSpan
from specchat.core.types import TokenKind

PROP_KIND = QTextFormat.Property.UserProperty + 1
PROP_ROUND = QTextFormat.Property.UserProperty + 2
PROP_TARGET_P = QTextFormat.Property.UserProperty + 3
PROP_DRAFT_P = QTextFormat.Property.UserProperty + 4
PROP_MESSAGE = QTextFormat.Property.UserProperty + 5

KIND_LABELS = {
    TokenKind.PENDING: "pending draft",
    TokenKind.ACCEPTED: "accepted draft",
    TokenKind.REJECTED: "rejected draft",
    TokenKind.TARGET: "target token",
}


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Base).lightness() < 128


def kind_colour(kind: TokenKind, palette: QPalette) -> QColor:
    dark = is_dark(palette)
    text = palette.color(QPalette.ColorRole.Text)
    if kind is TokenKind.ACCEPTED:
        return QColor("#56d364" if dark else "#1a7f37")
    if kind is TokenKind.REJECTED:
        return QColor("#ff7b72" if dark else "#cf222e")
    if kind is TokenKind.PENDING:
        base = palette.color(QPalette.ColorRole.Base)
        return QColor(
            (text.red() + base.red()) // 2, (text.green() + base.green()) // 2, (text.blue() + base.blue()) // 2
        )
    return text


def kind_format(kind: TokenKind, palette: QPalette) -> QTextCharFormat:
    """The base format of a kind (no tooltip)."""
    fmt = QTextCharFormat()
    fmt.setForeground(kind_colour(kind, palette))
    fmt.setProperty(PROP_KIND, kind.value)
    if kind is TokenKind.PENDING:
        fmt.setFontItalic(True)
    elif kind is TokenKind.ACCEPTED:
        fmt.setFontUnderline(True)
        fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.SingleUnderline)
    elif kind is TokenKind.REJECTED:
        fmt.setFontStrikeOut(True)
    elif kind is TokenKind.TARGET:
        fmt.setFontWeight(QFont.Weight.Bold)
    return fmt


def _prob(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.2f}"


def span_tooltip(span: TokenSpan) -> str:
    return (
        f"{KIND_LABELS[span.kind]} · round {span.round} · "
        f"target p={_prob(span.target_prob)} · draft p={_prob(span.draft_prob)}"
    )


def span_format(span: TokenSpan, palette: QPalette, message_index: int) -> QTextCharFormat:
    """The format of one shown token: its kind's look plus tooltip and properties."""
    fmt = kind_format(span.kind, palette)
    fmt.setToolTip(span_tooltip(span))
    fmt.setProperty(PROP_ROUND, span.round)
    if span.target_prob is not None:
        fmt.setProperty(PROP_TARGET_P, float(span.target_prob))
    if span.draft_prob is not None:
        fmt.setProperty(PROP_DRAFT_P, float(span.draft_prob))
    fmt.setProperty(PROP_MESSAGE, message_index)
    return fmt


def legend_html(palette: QPalette) -> str:
    """One line of rich text showing each kind's look."""
    parts = []
    for kind, css in (
        (TokenKind.ACCEPTED, "text-decoration: underline"),
        (TokenKind.REJECTED, "text-decoration: line-through"),
        (TokenKind.TARGET, "font-weight: bold"),
        (TokenKind.PENDING, "font-style: italic"),
    ):
        colour = kind_colour(kind, palette).name()
        parts.append(f'<span style="color: {colour}; {css}">{KIND_LABELS[kind]}</span>')
    return " &nbsp; ".join(parts)
