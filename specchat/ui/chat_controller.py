"""The window's chat controller: the Qt-free :class:`~specchat.core.chat.controller.ChatLogic` with signals.

All the logic (the open conversation, its replies, versions and edits) lives in
``core/chat/controller.py`` and is tested there without Qt; this adapter only
turns what it tells its listener into Qt signals for the window's views.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from specchat.core.chat.attachments import Attachment
from specchat.core.chat.controller import TITLE_CHARS as TITLE_CHARS
from specchat.core.chat.controller import ChatListener, ChatLogic
from specchat.core.chat.controller import ReplyHost as ReplyHost
from specchat.core.chat.controller import ReplySettings as ReplySettings
from specchat.core.chat.controller import transcript_of as transcript_of
from specchat.core.chat.store import ConversationStore
from specchat.core.engine.depth import DepthControl
from specchat.core.types import Finished


class ChatController(ChatLogic, QObject):
    """Send, regenerate, edit, stop; conversations opened, created and deleted (see ``ChatLogic``)."""

    transcript_replaced = Signal()  # a different or reloaded transcript: redraw it
    message_appended = Signal()  # the transcript's last message is new: draw it
    events_folded = Signal(list)  # engine events, already folded into the transcript
    reply_started = Signal()
    reply_finished = Signal(object)  # Finished
    conversations_changed = Signal()
    notice = Signal(str)  # a one-line error for the user
    status = Signal(str)  # a passing status-bar message
    composer_text = Signal(str, bool)  # text for the composer; True: replace what is typed there
    composer_attachments = Signal(list)  # files for the composer (an edited or withdrawn message's)

    def __init__(
        self,
        store: ConversationStore,
        host: ReplyHost,
        reply_settings: Callable[[], ReplySettings],
        depth_control: DepthControl,
        parent: QObject | None = None,
    ) -> None:
        # ChatLogic comes first in the bases (PySide's QObject.__init__ would call the next __init__ in
        # line without arguments), so each base is initialised by name.
        QObject.__init__(self, parent)
        ChatLogic.__init__(self, store, host, reply_settings, depth_control, _Signals(self))


class _Signals(ChatListener):
    """Relays the logic's calls to the controller's signals."""

    def __init__(self, controller: ChatController) -> None:
        self._c = controller

    def transcript_replaced(self) -> None:
        self._c.transcript_replaced.emit()

    def message_appended(self) -> None:
        self._c.message_appended.emit()

    def events_folded(self, batch: list[object]) -> None:
        self._c.events_folded.emit(batch)

    def reply_started(self) -> None:
        self._c.reply_started.emit()

    def reply_finished(self, finished: Finished) -> None:
        self._c.reply_finished.emit(finished)

    def conversations_changed(self) -> None:
        self._c.conversations_changed.emit()

    def notice(self, text: str) -> None:
        self._c.notice.emit(text)

    def status(self, text: str) -> None:
        self._c.status.emit(text)

    def composer_text(self, text: str, replace: bool) -> None:
        self._c.composer_text.emit(text, replace)

    def composer_attachments(self, attachments: list[Attachment]) -> None:
        self._c.composer_attachments.emit(attachments)
