"""The chat's turns as the eye reads them: the user's on a tinted card with rounded corners, the assistant's on
the page under a small role line; and the conversation in a column of readable width.

A QTextDocument draws no rounded backgrounds, so the card is painted under the text: each block of a user's
turn carries :data:`PROP_CARD` (its message index) and side margins for the card's padding, and
:func:`paint_cards` fills a rounded rectangle behind each run of such blocks in view before the document is
drawn. The blocks stay plain blocks (no frame), so hit-testing, copying and the code boxes' frames are as before.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, QRectF
from PySide6.QtGui import QPainter, QPalette, QTextBlock, QTextBlockFormat, QTextFormat
from PySide6.QtWidgets import QTextBrowser

from . import design

PROP_CARD = QTextFormat.Property.UserProperty + 41  # on each block of a user's turn: its message index
DOCUMENT_MARGIN = 12


def turn_block(top: float = 0, card: int | None = None) -> QTextBlockFormat:
    """A block format of a turn: ``top`` pixels above it; inside the card of message ``card`` when given."""
    fmt = QTextBlockFormat()
    fmt.setTopMargin(top)
    if card is not None:
        fmt.setProperty(PROP_CARD, card)
        fmt.setLeftMargin(design.CARD_PAD_X)
        fmt.setRightMargin(design.CARD_PAD_X)
    return fmt


def header_top(first: bool) -> float:
    """Space above a turn's role line: room for the card's padding (its own or the turn's above) and the gap."""
    return design.CARD_PAD_Y + 2 if first else design.CARD_PAD_Y + design.TURN_GAP


def card_of(block: QTextBlock) -> int | None:
    value = block.blockFormat().property(PROP_CARD)
    return int(value) if value is not None else None


def card_rects(browser: QTextBrowser) -> list[tuple[int, QRectF]]:
    """The cards in view: each user turn's message index and its rectangle in viewport coordinates."""
    doc = browser.document()
    layout = doc.documentLayout()
    viewport = browser.viewport().rect()
    dy = browser.verticalScrollBar().value()
    dx = browser.horizontalScrollBar().value()
    block = browser.cursorForPosition(QPoint(0, 0)).block()
    while block.isValid() and block.previous().isValid() and card_of(block) is not None:
        block = block.previous()  # a card begun above the view
    left = doc.documentMargin() - dx
    width = doc.textWidth() - 2 * doc.documentMargin() if doc.textWidth() > 0 else viewport.width() - 2 * left
    cards: list[tuple[int, QRectF]] = []
    current: tuple[int, float, float] | None = None  # message index, top, bottom (document y)
    while block.isValid():
        index = card_of(block)
        rect = layout.blockBoundingRect(block)
        if index is not None and block.isVisible():
            if current is not None and current[0] == index:
                current = (index, current[1], rect.bottom())
            else:
                if current is not None:
                    cards.append((current[0], QRectF(left, current[1], width, current[2] - current[1])))
                current = (index, rect.top(), rect.bottom())
        elif current is not None:
            cards.append((current[0], QRectF(left, current[1], width, current[2] - current[1])))
            current = None
        if rect.top() - dy > viewport.bottom() and current is None:
            break
        block = block.next()
    if current is not None:
        cards.append((current[0], QRectF(left, current[1], width, current[2] - current[1])))
    pad = design.CARD_PAD_Y
    return [(i, r.adjusted(0, -pad, 0, pad).translated(0, -dy)) for i, r in cards]


def paint_cards(browser: QTextBrowser, painter: QPainter, area: QRect) -> None:
    """Fill the cards of the user turns in ``area`` (viewport coordinates) with the card colour."""
    colour = design.card_colour(browser.palette())
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setPen(colour)
    painter.setBrush(colour)
    for _index, rect in card_rects(browser):
        if rect.intersects(QRectF(area)):
            painter.drawRoundedRect(rect, design.CARD_RADIUS, design.CARD_RADIUS)


def column_margin(width: int) -> int:
    """Pixels left and right of the conversation's column in a view ``width`` wide (0 while it fits)."""
    return max(0, (width - design.COLUMN_MAX) // 2)


def role_colour(user: bool) -> QPalette.ColorRole:
    """The role line's colour: muted on the user's card, the accent over the assistant's turn."""
    return QPalette.ColorRole.PlaceholderText if user else QPalette.ColorRole.Link
