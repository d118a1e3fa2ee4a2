"""Rejected drafts inside code blocks, marked without touching the code's text.

In prose a rejection is a small × between characters (markdown_render.py);
inside code that reads as corrupted code (``"×Author":``, ``[::-1]×``). There
the character after a rejection gets a wavy underline in the rejection colour
instead, with the draft's guess in its tooltip, so the code stays exactly as
written. The verdict view still shows every rejected draft inline.
"""

from __future__ import annotations

from PySide6.QtGui import QPalette, QTextCharFormat, QTextCursor, QTextFormat

from specchat.core.chat.transcript import TokenSpan

from .token_styles import marker_colour, rejection_tooltip

PROP_CODE_MARK = QTextFormat.Property.UserProperty + 41  # on a code character marked for rejections: True


def code_mark(groups: list[list[TokenSpan]], palette: QPalette) -> QTextCharFormat:
    """What a code character after rejected drafts gets on top of its own format."""
    fmt = QTextCharFormat()
    fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.WaveUnderline)
    fmt.setUnderlineColor(marker_colour(palette))
    fmt.setToolTip(rejection_tooltip(groups))
    fmt.setProperty(PROP_CODE_MARK, True)
    return fmt


def marked(base: QTextCharFormat, mark: QTextCharFormat) -> QTextCharFormat:
    """``base`` with ``mark`` on top: its tooltip tells the rejection (the token's own stays in the X-ray)."""
    fmt = QTextCharFormat(base)
    fmt.merge(mark)
    return fmt


def mark_before(cursor: QTextCursor, position: int, mark: QTextCharFormat) -> None:
    """Mark the character just before ``position`` (rejections after a code block's last character)."""
    at = QTextCursor(cursor.document())
    at.setPosition(position - 1)
    at.setPosition(position, QTextCursor.MoveMode.KeepAnchor)
    at.setCharFormat(marked(at.charFormat(), mark))


def code_mark_count(cursor: QTextCursor) -> int:
    """Characters in the document marked for rejected drafts inside code."""
    count, block = 0, cursor.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            if frag.charFormat().property(PROP_CODE_MARK):
                count += frag.length()
            it += 1
        block = block.next()
    return count
