"""The page both looks of the chat view draw on: shared state, each message's chrome, the Renderer interface.

A message is a header ("You" / "Assistant", with ‹ n/m › when it has other
versions) and a body; a user's message sits on a tinted card (chat_cards.py).
A reply that did not end on its own gets a note ("stopped at the 512-token
limit"), and the last one that can go on a "Continue" link; a finished reply
then gets its line of figures (reply_footer.py).
The body is the look's: the reading view (chat_reading.py) or the verdict view
(chat_verdicts.py), both behind :class:`Renderer`, which the view
(chat_view.py) switches between.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from PySide6.QtGui import QFont, QPalette, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextFormat
from PySide6.QtWidgets import QTextBrowser

from specchat.core.chat.transcript import Message, Transcript
from specchat.core.types import Drafted, Finished, Verified

from .chat_cards import header_top, role_colour, turn_block
from .markdown_render import new_block
from .reply_footer import insert_footer
from .token_styles import PROP_CHROME, PROP_MESSAGE, reading_format

StreamEvent = Drafted | Verified | Finished

_NOTES = {
    "cancelled": "stopped",
    "context_full": "stopped: the context is full",
    "error": "stopped by an error",
    None: "stopped: the app closed",
}


def finish_note(msg: Message) -> str:
    """The mark shown after a reply that did not end on its own ("" for a complete one)."""
    if msg.role != "assistant" or not msg.finished:
        return ""
    if msg.finish_reason == "max_tokens":
        limit = msg.figures.max_tokens if msg.figures is not None else 0
        return f"stopped at the {limit}-token limit" if limit else "stopped at the token limit"
    return _NOTES.get(msg.finish_reason, "")


@dataclass(eq=False)
class Page:
    """What the view and both renderers share: the document's widget, the transcript, the look's options and how
    far the reply that streams has been drawn."""

    browser: QTextBrowser
    transcript: Transcript
    mono: QFont
    hide_rejected: bool = False
    live: Message | None = None  # the reply being drawn as it streams
    seen: int = 0  # spans of the live reply that the queued events drawn so far account for
    drawn: int = 0  # spans of the live reply drawn
    pending: Drafted | None = None  # the draft waiting for its verdict
    body_start: int = 0  # where the last message's body begins
    reply_start: int = 0  # where the live reply's text begins (the verdict view redraws it from there)
    continue_link: tuple[int, int] | None = None  # "  Continue" after the last reply's note, if drawn

    def palette(self) -> QPalette:
        return self.browser.palette()

    def end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.browser.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    # -- chrome ------------------------------------------------------------------------

    def insert_header(self, cursor: QTextCursor, index: int) -> None:
        """A message's header line, on a block of its own, with the version arrows when it has versions."""
        msg = self.transcript.messages[index]
        user = msg.role == "user"
        first = self.browser.document().isEmpty()
        block = turn_block(header_top(first), index if user else None)
        block.setBottomMargin(3)
        if first:
            cursor.setBlockFormat(block)
        else:
            new_block(cursor, block)
        header = QTextCharFormat()
        header.setFontWeight(QFont.Weight.DemiBold)
        header.setProperty(QTextFormat.Property.FontSizeAdjustment, -1)
        header.setForeground(self.palette().color(role_colour(user)))
        header.setProperty(PROP_MESSAGE, index)
        cursor.insertText("You" if msg.role == "user" else msg.role.capitalize(), header)
        if msg.versions > 1:  # regenerated or edited: which version this is; the arrows flip it
            header.setFontWeight(QFont.Weight.Normal)
            header.setForeground(self.palette().color(QPalette.ColorRole.PlaceholderText))
            header.setToolTip("Other versions: click the arrows, or Alt+Left / Alt+Right")
            cursor.insertText("  ", header)
            self._insert_version_arrow(cursor, header, index, -1)
            cursor.insertText(f" {msg.version}/{msg.versions} ", header)
            self._insert_version_arrow(cursor, header, index, +1)

    def _insert_version_arrow(self, cursor: QTextCursor, header: QTextCharFormat, index: int, step: int) -> None:
        """‹ or ›: a link to the previous or next version, or a greyed arrow at the first or last one."""
        msg = self.transcript.messages[index]
        arrow = QTextCharFormat(header)
        arrow.setFontWeight(QFont.Weight.Bold)
        if 1 <= msg.version + step <= msg.versions:
            arrow.setAnchor(True)
            arrow.setAnchorHref(f"specchat:version/{index}/{step}")
            arrow.setForeground(self.palette().color(QPalette.ColorRole.Link))
            arrow.setToolTip(
                f"{'Previous' if step < 0 else 'Next'} version ({'Alt+Left' if step < 0 else 'Alt+Right'})"
            )
        cursor.insertText("‹" if step < 0 else "›", arrow)

    def insert_note(self, cursor: QTextCursor, index: int, own_line: bool = False) -> None:
        """The finish note after a reply that did not end on its own, "Continue" after the last one, then the
        reply's figures line (reply_footer.py) once it has finished."""
        self._insert_finish_note(cursor, index, own_line)
        insert_footer(cursor, self.transcript.messages[index], index, self.palette())

    def _insert_finish_note(self, cursor: QTextCursor, index: int, own_line: bool) -> None:
        note = finish_note(self.transcript.messages[index])
        if note:
            if own_line:  # a reply with no text, or one ending in a code box or table
                new_block(cursor, QTextBlockFormat())
            fmt = QTextCharFormat()
            fmt.setFontItalic(True)
            fmt.setForeground(self.palette().color(QPalette.ColorRole.PlaceholderText))
            fmt.setProperty(PROP_MESSAGE, index)
            fmt.setProperty(PROP_CHROME, True)
            cursor.insertText(f" ({note})", fmt)
            if index == len(self.transcript.messages) - 1 and self.transcript.can_continue():
                link = QTextCharFormat(fmt)
                link.setFontItalic(False)
                link.setFontWeight(QFont.Weight.DemiBold)
                link.setForeground(self.palette().color(QPalette.ColorRole.Link))
                link.setAnchor(True)
                link.setAnchorHref(f"specchat:continue/{index}/0")
                link.setToolTip("Go on from where the limit cut the reply, into the same message")
                start = cursor.position()
                cursor.insertText("  ", fmt)
                cursor.insertText("Continue", link)
                self.continue_link = (start, cursor.position())

    def insert_attachments(self, cursor: QTextCursor, index: int) -> None:
        """A user message's files, on a line under its header: a chip each (name, size, tokens); a click previews
        the text the model read."""
        msg = self.transcript.messages[index]
        new_block(cursor, turn_block(2, index))
        for n, attachment in enumerate(msg.attachments):
            chip = QTextCharFormat()
            chip.setBackground(self.palette().color(QPalette.ColorRole.AlternateBase))
            chip.setForeground(self.palette().color(QPalette.ColorRole.Link))
            chip.setAnchor(True)
            chip.setAnchorHref(f"specchat:attachment/{index}/{n}")
            chip.setToolTip(
                "Click to see the text the model read"
                + (f"\nCut to fit the context: {attachment.note}" if attachment.note else "")
            )
            chip.setProperty(PROP_MESSAGE, index)
            chip.setProperty(PROP_CHROME, True)
            gap = QTextCharFormat()
            gap.setProperty(PROP_MESSAGE, index)
            gap.setProperty(PROP_CHROME, True)
            if n:
                cursor.insertText("  ", gap)
            cursor.insertText(f"\u00a0{attachment.label}\u00a0", chip)

    def drop_continue_link(self, cursor: QTextCursor) -> None:
        """Remove the "Continue" link drawn after a reply that is no longer the last (its note stays)."""
        if self.continue_link is None:
            return
        start, end = self.continue_link
        self.continue_link = None
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        cursor.movePosition(QTextCursor.MoveOperation.End)


class Renderer(ABC):
    """One look of the chat view: how a reply's body is drawn whole, and drawn on as its events arrive."""

    def __init__(self, page: Page) -> None:
        self.page = page

    def insert_message(self, cursor: QTextCursor, index: int) -> None:
        """Draw message ``index`` whole at ``cursor``: its header, then its body in this look."""
        page = self.page
        page.insert_header(cursor, index)
        msg = page.transcript.messages[index]
        if msg.role == "assistant":
            self.insert_reply(cursor, index)
            return
        if msg.attachments:
            page.insert_attachments(cursor, index)
        cursor.insertBlock(turn_block(2, index))
        page.body_start = cursor.position()
        cursor.insertText(msg.text, reading_format(None, page.palette(), index))

    @abstractmethod
    def insert_reply(self, cursor: QTextCursor, index: int) -> None:
        """Draw reply ``index``'s body (after its header) and its finish note."""

    @abstractmethod
    def flush(self, events: list[StreamEvent], msg: Message, index: int) -> None:
        """Draw on the live reply ``msg`` (message ``index``, already folded) for ``events``, in one edit block."""

    @abstractmethod
    def insert_pending(self, cursor: QTextCursor, index: int) -> None:
        """Draw the live reply's pending draft (after a redraw), if any."""

    @abstractmethod
    def forget_pending(self) -> None:
        """Forget where a pending draft was drawn (the document was cleared)."""
