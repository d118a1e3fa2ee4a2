"""A code block's Copy link says "Copied" for a moment once the code is on the clipboard.

The link is text in the chat document, so its label is swapped in place and
back after :data:`COPIED_MS`. While a reply streams the document's positions
are being tracked for it, so the feedback is then a tooltip instead; the
"Continue" link's place, kept by position, moves with the label.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QTimer
from PySide6.QtGui import QTextCursor, QTextDocument
from PySide6.QtWidgets import QTextBrowser, QToolTip

from .chat_page import Page

COPIED_MS = 1500
COPY_LABEL = "Copy"
COPIED_LABEL = "Copied"


def find_link(document: QTextDocument, href: str, label: str) -> tuple[int, int] | None:
    """Where the link to ``href`` reading ``label`` is in ``document``: its start and end, or None."""
    block = document.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            if frag.charFormat().anchorHref() == href and frag.text() == label:
                return frag.position(), frag.position() + frag.length()
            it += 1
        block = block.next()
    return None


class CopyFeedback:
    """Swaps a Copy link's label to "Copied" and back."""

    def __init__(self, browser: QTextBrowser, page: Page) -> None:
        self._browser = browser
        self._page = page

    def copied(self, href: str, at: QPoint) -> bool:
        """Say the code of the link to ``href`` was copied; True if the link itself says it (False: a tooltip)."""
        if self._page.live is None and self._relabel(href, COPY_LABEL, COPIED_LABEL):
            QTimer.singleShot(COPIED_MS, self._browser, lambda: self._restore(href))
            return True
        QToolTip.showText(at, COPIED_LABEL, self._browser.viewport())
        return False

    def _restore(self, href: str) -> None:
        """ "Copied" back to "Copy"; if a reply began streaming meanwhile, once it has ended."""
        if self._page.live is not None:
            QTimer.singleShot(COPIED_MS, self._browser, lambda: self._restore(href))
            return
        self._relabel(href, COPIED_LABEL, COPY_LABEL)

    def _relabel(self, href: str, old: str, new: str) -> bool:
        document = self._browser.document()
        found = find_link(document, href, old)
        if found is None or self._page.live is not None:  # redrawn meanwhile, or a reply streams now
            return False
        start, end = found
        cursor = QTextCursor(document)
        cursor.setPosition(start + 1)
        fmt = cursor.charFormat()
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        cursor.insertText(new, fmt)
        link = self._page.continue_link
        if link is not None and link[0] >= end:
            shift = len(new) - len(old)
            self._page.continue_link = (link[0] + shift, link[1] + shift)
        return True
