"""What the user can do with a message in the chat view: its actions (copy, regenerate, edit, continue, race,
flip versions) for the context menu and the hover bar, the links drawn in the text, and clean copies.

The actions only ask: each request goes to a callback (the view's signals),
and the window decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QPoint, QUrl
from PySide6.QtGui import QAction, QCursor, QDesktopServices, QGuiApplication, QTextDocument
from PySide6.QtWidgets import QMenu, QTextBrowser, QToolTip

from specchat.core.chat.race import race_refusal
from specchat.core.chat.race_record import RaceRecord

from .attachment_chips import AttachmentPreview, show_preview
from .chat_hits import format_at, message_index_at
from .chat_page import Page
from .copy_feedback import CopyFeedback
from .markdown_blocks import FateIndex, fence_code
from .token_styles import PROP_CHROME, PROP_CODE, rejection_tooltip


def clean_text(document: QTextDocument, start: int, end: int) -> str:
    """The document's text between two positions without the view's own marks (markers, labels, ghosts)."""
    lines: list[str] = []
    block = document.findBlock(start)
    while block.isValid() and block.position() <= end:
        parts: list[str] = []
        chrome_only = False
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            a, b = max(start, frag.position()), min(end, frag.position() + frag.length())
            if frag.charFormat().property(PROP_CHROME):
                chrome_only = chrome_only or not parts
            elif a < b:
                parts.append(frag.text()[a - frag.position() : b - frag.position()])
                chrome_only = False
            it += 1
        if not (chrome_only and not parts):
            lines.append("".join(parts))
        block = block.next()
    return "\n".join(lines).replace("\u2028", "\n").replace("\u00a0", " ")


@dataclass(frozen=True)
class Requests:
    """Where a message's actions send what the user asked for."""

    regenerate: Callable[[], None]
    edit: Callable[[int], None]  # the index of the user message to edit and resend
    version: Callable[[int, int], None]  # a message with versions, and -1 or +1
    race: Callable[[int], None]  # a reply to race against plain decoding (or to replay its race)
    go_on: Callable[[], None]  # continue the last reply, cut at the token limit


class MessageActions:
    """A message's actions, the view's context menu, its links and its clean copies."""

    def __init__(self, browser: QTextBrowser, page: Page, requests: Requests) -> None:
        self._browser = browser
        self._page = page
        self._requests = requests
        self._copy_feedback = CopyFeedback(browser, page)
        self.preview: AttachmentPreview | None = None  # the last attachment previewed from the chat

    @property
    def _busy(self) -> bool:
        return self._page.live is not None

    def copy_message(self, index: int) -> None:
        """Put the message's text (its Markdown source, no rejected drafts) on the clipboard."""
        QGuiApplication.clipboard().setText(self._page.transcript.messages[index].content)

    def copy_code(self, index: int, offset: int) -> bool:
        """Put the code of the block at source ``offset`` of message ``index`` on the clipboard, without fences."""
        messages = self._page.transcript.messages
        if not 0 <= index < len(messages):
            return False
        code = fence_code(messages[index].content, offset)
        if code is None:
            return False
        QGuiApplication.clipboard().setText(code)
        return True

    def copy_selection(self) -> None:
        """Copy the selection's text without markers, labels or pending drafts (see ChatView.copy_selection)."""
        cursor = self._browser.textCursor()
        if cursor.hasSelection():
            text = clean_text(self._browser.document(), cursor.selectionStart(), cursor.selectionEnd())
            QGuiApplication.clipboard().setText(text)

    def context_menu(self, pos: QPoint) -> QMenu:
        """The menu at a viewport position: Qt's own (its Copy giving clean text) plus the message's actions."""
        menu = self._browser.createStandardContextMenu(pos)
        menu.setToolTipsVisible(True)  # a disabled race says why
        for action in menu.actions():
            if action.objectName() == "edit-copy":  # Qt's own Copy: the clean text instead
                action.triggered.disconnect()
                action.triggered.connect(lambda *_: self.copy_selection())
        index = message_index_at(self._browser, pos)
        code = format_at(self._browser, pos).property(PROP_CODE)
        if index is not None and code is not None:
            copy_code = QAction("Copy code block", menu)
            copy_code.triggered.connect(lambda: self.copy_code(index, int(code)))
            menu.addAction(copy_code)
        for action in self.message_actions(index):
            menu.addAction(action)
        return menu

    def message_actions(self, index: int | None) -> list[QAction]:
        """Copy / regenerate / edit actions for the message at ``index``."""
        messages = self._page.transcript.messages
        if index is None or not 0 <= index < len(messages):
            return []
        owner, requests = self._browser, self._requests
        actions: list[QAction] = []
        copy = QAction("Copy message", owner)
        copy.setObjectName("copy")
        copy.triggered.connect(lambda: self.copy_message(index))
        actions.append(copy)
        msg = messages[index]
        busy = self._busy
        last = index == len(messages) - 1
        if msg.role == "assistant" and last:
            regen = QAction("Regenerate reply", owner)
            regen.setObjectName("regenerate")
            regen.setEnabled(not busy)
            regen.triggered.connect(lambda *_: requests.regenerate())
            actions.append(regen)
        if msg.role == "user":
            edit = QAction("Edit and resend", owner)
            edit.setObjectName("edit")
            edit.setEnabled(not busy)
            edit.triggered.connect(lambda: requests.edit(index))
            actions.append(edit)
        if msg.role == "assistant" and last and self._page.transcript.can_continue():
            go_on = QAction("Continue the reply", owner)
            go_on.setEnabled(not busy)
            go_on.triggered.connect(lambda *_: requests.go_on())
            actions.append(go_on)
        if msg.role == "assistant":
            actions.append(self.race_action(index))
        for label, step in (("Previous version", -1), ("Next version", +1)):
            if msg.versions > 1:
                flip = QAction(f"{label} ({msg.version}/{msg.versions})", owner)
                flip.setEnabled(not busy and 1 <= msg.version + step <= msg.versions)
                flip.triggered.connect(lambda *_, s=step: requests.version(index, s))
                actions.append(flip)
        return actions

    def race_action(self, index: int) -> QAction:
        """Race plain decoding on the reply at ``index``, or replay its stored race."""
        msg = self._page.transcript.messages[index]
        stored = RaceRecord.from_dict(msg.figures.race if msg.figures else None) is not None
        action = QAction("Replay the race with plain decoding" if stored else "Race plain decoding", self._browser)
        refusal = "wait for the reply to finish" if self._busy else race_refusal(msg)
        action.setObjectName("race")
        action.setEnabled(not refusal)
        action.setToolTip(
            refusal
            or (
                "Replay both streams at their recorded pace"
                if stored
                else "Decode the same prompt with the target alone and replay both side by side"
            )
        )
        action.triggered.connect(lambda *_: self._requests.race(index))
        return action

    def on_anchor(self, url: QUrl) -> None:
        """A link in the text clicked: a web link opens; the view's own (continue, versions, copy a code block,
        a rejection marker) act."""
        if url.scheme() != "specchat":
            if url.scheme() in ("http", "https", "mailto"):
                QDesktopServices.openUrl(url)
            return
        what, _, rest = url.path().partition("/")
        try:
            index_text, _, keys_text = rest.partition("/")
            index, keys = int(index_text), [int(k) for k in keys_text.split(".")]
        except ValueError:
            return
        messages = self._page.transcript.messages
        viewport = self._browser.viewport()
        if what == "continue":
            if index == len(messages) - 1 and not self._busy:
                self._requests.go_on()
        elif what == "version":
            if not self._busy:
                self._requests.version(index, keys[0])
        elif what == "attachment" and 0 <= index < len(messages) and 0 <= keys[0] < len(messages[index].attachments):
            self.preview = show_preview(messages[index].attachments[keys[0]], self._browser.window())
        elif what == "copy" and self.copy_code(index, keys[0]):
            self._copy_feedback.copied(url.toString(), QCursor.pos())
        elif what == "rejected" and 0 <= index < len(messages):
            fates = FateIndex(messages[index].spans or [])
            groups = [r.spans for r in fates.rejections if r.first_span in keys]
            if groups:
                QToolTip.showText(QCursor.pos(), rejection_tooltip(groups), viewport)
