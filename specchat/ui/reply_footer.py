"""The quiet line of figures under each finished reply: tok/s, tokens, time to first token and the speed-up.

"41.2 tok/s · 128 tokens · first token 0.31 s · ×1.62", from the figures
stored with the reply (``ReplyFigures``), so a reply reopened after a restart
shows the same line. The speed-up is the reply's own, against plain decoding
timed right after it (``baseline.reply_speedup``); with none, it is left out.
The line is chrome: a copy of the text leaves it out.
"""

from __future__ import annotations

from PySide6.QtGui import QPalette, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextFormat

from specchat.core.chat.baseline import reply_speedup
from specchat.core.chat.transcript import Message, ReplyFigures
from specchat.core.types import RATE_DIGITS

from .token_styles import PROP_CHROME, PROP_MESSAGE

SEPARATOR = " · "
PROP_FOOTER = QTextFormat.Property.UserProperty + 40  # on a reply's figures line: the message index
MIN_WAIT_SHOWN = 0.05  # seconds of waiting for the runtime worth saying


def first_token_text(figures: ReplyFigures) -> str:
    """ "0.31 s", or "0.40 s after waiting 15.0 s" when the reply waited for a served request ("" if unknown)."""
    if figures.first_token_seconds <= 0:
        return ""
    text = f"{figures.first_token_seconds:.2f} s"
    if figures.waited_seconds >= MIN_WAIT_SHOWN:
        text += f" after waiting {figures.waited_seconds:.1f} s"
    return text


def footer_text(figures: ReplyFigures | None) -> tuple[str, str]:
    """The figures line of a finished reply and its tooltip; ("", "") without the engine's figures (a reply
    cut short before it reported them, or none generated)."""
    final = figures.final if figures is not None else None
    if figures is None or final is None or figures.generated <= 0:
        return "", ""
    tps = round(final.tokens_per_second, RATE_DIGITS)
    parts = [f"{tps:.1f} tok/s"] if tps > 0 else []
    parts.append(f"{figures.generated} token{'' if figures.generated == 1 else 's'}")
    first = first_token_text(figures) if round(figures.first_token_seconds, 2) > 0 else ""  # "0.00 s" says nothing
    if first:
        parts.append(f"first token {first}")
    tips = ["Tokens per second of the reply, tokens generated, and the time from decoding to its first token"]
    shown = reply_speedup(figures.generated, figures.passes, tps, final.plain_tokens_per_second, final.plain_tokens)
    if shown.ratio is not None:
        parts.append(f"×{shown.ratio:.2f}")
    tips.append(shown.why)
    return SEPARATOR.join(parts), "\n".join(tips)


def insert_footer(cursor: QTextCursor, msg: Message, index: int, palette: QPalette) -> bool:
    """Draw reply ``index``'s figures line on a block of its own at ``cursor`` (a finished reply only).

    Whether a line was drawn.
    """
    if msg.role != "assistant" or not msg.finished:
        return False
    text, tip = footer_text(msg.figures)
    if not text:
        return False
    block = QTextBlockFormat()
    block.setTopMargin(2)
    cursor.insertBlock(block, QTextCharFormat())
    fmt = QTextCharFormat()
    fmt.setForeground(palette.color(QPalette.ColorRole.PlaceholderText))
    fmt.setProperty(QTextFormat.Property.FontSizeAdjustment, -1)
    fmt.setProperty(PROP_MESSAGE, index)
    fmt.setProperty(PROP_CHROME, True)
    fmt.setProperty(PROP_FOOTER, index)
    fmt.setToolTip(tip)
    cursor.insertText(text, fmt)
    return True


def footer_line(cursor: QTextCursor, index: int) -> str:
    """The figures line drawn for reply ``index`` in the document of ``cursor`` ("" if none): for tests and
    screen readers alike, read back from the document."""
    block = cursor.document().begin()
    while block.isValid():
        it = block.begin()
        if not it.atEnd() and it.fragment().charFormat().property(PROP_FOOTER) == index:
            return block.text()
        block = block.next()
    return ""
