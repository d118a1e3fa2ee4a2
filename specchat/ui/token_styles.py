"""Character formats for each token kind, from the current palette.

Two looks. The verdict view (raw text, every fate inline) is strong and
differs by more than hue (colour-blind safe): pending is italic, accepted is
underlined, rejected is struck through, target is bold. The reading view
(rendered Markdown) keeps text readable: accepted drafts get a faint tint of
their colour behind them, target tokens look like plain text, and a rejection
is a small superscript marker whose tooltip says what the draft guessed.
"""

from __future__ import annotations

import html

from PySide6.QtGui import QColor, QFont, QPalette, QTextCharFormat, QTextFormat

from specchat.core.chat.store import TokenSpan
from specchat.core.chat.transcript import TokenDetail
from specchat.core.engine.lookup import INSERTED, REPLACED
from specchat.core.engine.registry import source_name
from specchat.core.types import DraftSource, TokenKind

PROP_KIND = QTextFormat.Property.UserProperty + 1
PROP_ROUND = QTextFormat.Property.UserProperty + 2
PROP_TARGET_P = QTextFormat.Property.UserProperty + 3
PROP_DRAFT_P = QTextFormat.Property.UserProperty + 4
PROP_MESSAGE = QTextFormat.Property.UserProperty + 5
PROP_CHROME = QTextFormat.Property.UserProperty + 6  # the view's own text (markers, labels): never copied
PROP_CODE = QTextFormat.Property.UserProperty + 7  # source offset of the code block a character is in
PROP_POSITION = QTextFormat.Property.UserProperty + 8  # a token's draft position in its round (0: the target's)

REJECTION_MARKER = "\u00d7"  # ×

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


def drafted_by(detail: TokenDetail) -> str:
    """Who proposed a token, in words: "drafted by lookup in report.pdf (match of 5 tokens)", "drafted by lookup
    in the conversation (...)", "the target's own token"..."""
    if detail.source is DraftSource.LOOKUP:
        n = detail.match_length
        where = detail.origin or "the conversation"
        if n == 0:  # lookup.resume_copy
            return f"drafted by lookup in {where} (its copy resumed after an edit)"
        if n in (INSERTED, REPLACED):  # lookup.guess_resumed
            edit = "inserted words" if n == INSERTED else "the words an edit replaced"
            return f"drafted by lookup in {where} (a guess: its copy goes on past {edit})"
        return f"drafted by lookup in {where} (match of {n} token{'' if n == 1 else 's'})"
    if detail.source is DraftSource.MODEL:
        return "drafted by the draft model"
    if detail.source is DraftSource.MTP:
        return "drafted by the model's own MTP heads"
    if detail.source is not None:
        return f"drafted by the {source_name(detail.source)}"
    return "the target's own token"


def shown_round(number: int) -> int:
    """A round as the user reads it: the engine counts every target pass from 0, the screen from 1 (the X-ray,
    tooltips and the round chart alike)."""
    return number + 1


def span_tooltip(span: TokenSpan) -> str:
    tip = (
        f"{KIND_LABELS[span.kind]} · round {shown_round(span.round)} · "
        f"target p={_prob(span.target_prob)} · draft p={_prob(span.draft_prob)}"
    )
    if span.detail is not None:
        tip += f"\n{drafted_by(span.detail)} · click for the X-ray"
    return tip


def blend(under: QColor, over: QColor, alpha: float) -> QColor:
    """``over`` laid on ``under`` at opacity ``alpha`` (an opaque colour, so it prints and copies alike)."""
    return QColor(
        round(under.red() + (over.red() - under.red()) * alpha),
        round(under.green() + (over.green() - under.green()) * alpha),
        round(under.blue() + (over.blue() - under.blue()) * alpha),
    )


def accepted_tint(palette: QPalette, background: QColor | None = None) -> QColor:
    """The faint background of an accepted draft in the reading view, over ``background`` (Base by default)."""
    under = background if background is not None else palette.color(QPalette.ColorRole.Base)
    return blend(under, kind_colour(TokenKind.ACCEPTED, palette), 0.2 if is_dark(palette) else 0.14)


def annotate(fmt: QTextCharFormat, span: TokenSpan, message_index: int) -> QTextCharFormat:
    """Give ``fmt`` a span's kind, tooltip, round, probabilities and message index."""
    fmt.setProperty(PROP_KIND, span.kind.value)
    fmt.setToolTip(span_tooltip(span))
    fmt.setProperty(PROP_ROUND, span.round)
    if span.target_prob is not None:
        fmt.setProperty(PROP_TARGET_P, float(span.target_prob))
    if span.draft_prob is not None:
        fmt.setProperty(PROP_DRAFT_P, float(span.draft_prob))
    fmt.setProperty(PROP_MESSAGE, message_index)
    if span.detail is not None:
        fmt.setProperty(PROP_POSITION, span.detail.position)
    return fmt


def span_format(span: TokenSpan, palette: QPalette, message_index: int) -> QTextCharFormat:
    """The verdict view's format of one shown token: its kind's strong look plus tooltip and properties."""
    return annotate(kind_format(span.kind, palette), span, message_index)


def reading_format(
    span: TokenSpan | None, palette: QPalette, message_index: int, background: QColor | None = None
) -> QTextCharFormat:
    """The reading view's format of rendered text from ``span`` (None: text with no fate, like a user's)."""
    fmt = QTextCharFormat()
    fmt.setForeground(palette.color(QPalette.ColorRole.Text))
    fmt.setProperty(PROP_MESSAGE, message_index)
    if span is None:
        return fmt
    if span.kind is TokenKind.ACCEPTED:
        fmt.setBackground(accepted_tint(palette, background))
    return annotate(fmt, span, message_index)


def _shown(text: str) -> str:
    return text.replace("\n", "\u23ce")  # ⏎


def rejection_tooltip(groups: list[list[TokenSpan]]) -> str:
    """What the draft guessed where it was rejected (rich text, escaped), with each guess's first figures.

    ``groups``: the drafts rejected in one round each, for the rejections shown by one marker.
    """
    parts = []
    for spans in groups:
        first = spans[0]
        guess = html.escape(_shown("".join(s.text for s in spans)))
        by = f"<br>{html.escape(drafted_by(first.detail), quote=False)}" if first.detail is not None else ""
        parts.append(
            f"rejected draft · round {shown_round(first.round)}<br>the draft guessed “<b>{guess}</b>”<br>"
            f"draft p={_prob(first.draft_prob)} · target p={_prob(first.target_prob)}{by}"
        )
    return "<qt>" + "<br><br>".join(parts) + "</qt>"


def marker_colour(palette: QPalette) -> QColor:
    """The rejection marker's colour: the rejected colour, softened toward the background (markers are many)."""
    return blend(palette.color(QPalette.ColorRole.Base), kind_colour(TokenKind.REJECTED, palette), 0.75)


def marker_format(groups: list[list[TokenSpan]], palette: QPalette, message_index: int, href: str) -> QTextCharFormat:
    """The small superscript marker left where drafts were rejected; clicking it shows the tooltip."""
    fmt = QTextCharFormat()
    fmt.setForeground(marker_colour(palette))
    fmt.setVerticalAlignment(QTextCharFormat.VerticalAlignment.AlignSuperScript)
    fmt.setProperty(PROP_KIND, TokenKind.REJECTED.value)
    fmt.setProperty(PROP_ROUND, groups[0][0].round)
    fmt.setProperty(PROP_MESSAGE, message_index)
    fmt.setProperty(PROP_CHROME, True)
    fmt.setToolTip(rejection_tooltip(groups))
    fmt.setAnchor(True)
    fmt.setAnchorHref(href)
    return fmt


def legend_html(palette: QPalette, verdicts: bool = True) -> str:
    """One line of rich text showing each kind's look in the verdict view, or in the reading view."""
    parts = []
    if verdicts:
        styles = (
            (TokenKind.ACCEPTED, "text-decoration: underline", ""),
            (TokenKind.REJECTED, "text-decoration: line-through", ""),
            (TokenKind.TARGET, "font-weight: bold", ""),
            (TokenKind.PENDING, "font-style: italic", ""),
        )
    else:
        text = palette.color(QPalette.ColorRole.Text).name()
        styles = (
            (TokenKind.ACCEPTED, f"color: {text}; background-color: {accepted_tint(palette).name()}", ""),
            (TokenKind.REJECTED, f"color: {text}", REJECTION_MARKER),
            (TokenKind.TARGET, f"color: {text}", ""),
            (TokenKind.PENDING, "font-style: italic", ""),
        )
    for kind, css, mark in styles:
        colour = kind_colour(kind, palette).name()
        label = KIND_LABELS[kind]
        if mark:
            label += f'<sup style="color: {marker_colour(palette).name()}">{mark}</sup>'
        parts.append(f'<span style="color: {colour}; {css}">{label}</span>')
    return " &nbsp; ".join(parts)
