"""Racing a reply against plain decoding from the window: whether it can, starting it, showing the panel."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QWidget

from specchat.core.chat.race import RaceRecord, race_refusal
from specchat.core.chat.transcript import Message

from .chat_controller import ChatController
from .race import RaceController, RacePanel


class ReplyRaces(QObject):
    """Races replies of the open conversation (one at a time) and shows each in a :class:`RacePanel`."""

    def __init__(self, races: RaceController, chat: ChatController, loaded: Callable[[], bool],
                 notice: Callable[[str], None], parent: QWidget) -> None:
        super().__init__(parent)
        self.races, self.chat, self.loaded, self.notice, self.parent_widget = races, chat, loaded, notice, parent
        self.panel: RacePanel | None = None
        races.ready.connect(self.show)

    def last_reply(self) -> int | None:
        msgs = self.chat.transcript.messages
        return next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].role == "assistant"), None)

    def refusal(self, index: int | None) -> str:
        """Why the reply at ``index`` cannot be raced (or its race replayed) now; "" when it can."""
        msgs = self.chat.transcript.messages
        if index is None or not 0 <= index < len(msgs):
            return "no reply to race"
        message = msgs[index]
        if RaceRecord.from_dict(message.figures.race if message.figures else None) is not None:
            return ""  # a stored race replays without the engine
        if self.chat.streaming_here:
            return "wait for the reply to finish"
        refusal = race_refusal(message)
        if not refusal and not self.loaded():
            refusal = "load the pair to race plain decoding"
        return refusal or ("a race is already running" if self.races.running else "")

    def race(self, index: int) -> bool:
        """Race plain decoding on the reply at ``index`` (on the engine thread), or replay its stored race."""
        refusal = self.refusal(index)
        if refusal:
            self.notice(refusal)
            return False
        return self.races.race(self.chat.transcript.messages[index], self.chat.transcript.history(index))

    def race_last(self) -> None:
        index = self.last_reply()
        if index is not None:
            self.race(index)

    def show(self, message: Message, record: RaceRecord) -> RacePanel:
        """Open the race panel on ``message``'s race and replay it."""
        if self.panel is not None:
            self.panel.close()
            self.panel.deleteLater()
        self.panel = RacePanel(message, record, parent=self.parent_widget)
        self.panel.show()
        self.panel.start()
        return self.panel
