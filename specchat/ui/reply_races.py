"""Racing a reply from the window: whether it can, starting it, its progress and Cancel, showing the panel."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QWidget

from specchat.core.chat.race import RaceProgress, race_refusal
from specchat.core.chat.race_record import RaceRecord
from specchat.core.chat.transcript import Message
from specchat.core.types import TextSource

from .chat_controller import ChatController
from .race import RaceController, RacePanel
from .race_progress import RaceProgressDialog


class ReplyRaces(QObject):
    """Races replies of the open conversation (one at a time), shows each running race's progress with a Cancel,
    and each finished race in a :class:`RacePanel` (whose *Race again* runs it anew)."""

    def __init__(
        self,
        races: RaceController,
        chat: ChatController,
        loaded: Callable[[], bool],
        notice: Callable[[str], None],
        parent: QWidget,
        baseline_rate: Callable[[], float] = lambda: 0.0,
    ) -> None:
        super().__init__(parent)
        self.races, self.chat, self.loaded, self.notice, self.parent_widget = races, chat, loaded, notice, parent
        self.baseline_rate = baseline_rate  # the pair's measured plain rate (0: none), for the drift check
        self.panel: RacePanel | None = None
        self.progress: RaceProgressDialog | None = None
        races.ready.connect(self.show)
        races.started.connect(self._show_progress)
        races.progressed.connect(self._on_progress)
        races.ended.connect(self._close_progress)

    def last_reply(self) -> int | None:
        msgs = self.chat.transcript.messages
        return next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].role == "assistant"), None)

    def refusal(self, index: int | None, again: bool = False) -> str:
        """Why the reply at ``index`` cannot be raced (or its race replayed, unless ``again``) now; "" if it can."""
        msgs = self.chat.transcript.messages
        if index is None or not 0 <= index < len(msgs):
            return "no reply to race"
        message = msgs[index]
        if not again and RaceRecord.from_dict(message.figures.race if message.figures else None) is not None:
            return ""  # a stored race replays without the engine
        if self.chat.streaming_here:
            return "wait for the reply to finish"
        refusal = race_refusal(message)
        if not refusal and not self.loaded():
            refusal = "load the pair to race plain decoding"
        return refusal or ("a race is already running" if self.races.running else "")

    def race(self, index: int, again: bool = False) -> bool:
        """Race the reply at ``index`` (on the engine thread), or replay its stored race unless ``again``."""
        refusal = self.refusal(index, again)
        if refusal:
            self.notice(refusal)
            return False
        transcript = self.chat.transcript
        return self.races.race(
            transcript.messages[index],
            transcript.history(index),
            again=again,
            baseline_rate=self.baseline_rate(),
            sources=[TextSource(a.name, a.text, "attachment") for a in transcript.attachments(index)],
        )

    def race_last(self) -> None:
        index = self.last_reply()
        if index is not None:
            self.race(index)

    def race_again(self, message: Message) -> bool:
        """Run the race on ``message`` anew (its stored race is replaced once the new one finishes)."""
        msgs = self.chat.transcript.messages
        index = next((i for i, m in enumerate(msgs) if m is message or (m.id is not None and m.id == message.id)), None)
        if index is None:
            self.notice("the raced reply is no longer shown")
            return False
        return self.race(index, again=True)

    def show(self, message: Message, record: RaceRecord) -> RacePanel:
        """Open the race panel on ``message``'s race and replay it."""
        if self.panel is not None:
            self.panel.close()
            self.panel.deleteLater()
        self.panel = RacePanel(message, record, parent=self.parent_widget)
        self.panel.race_again.clicked.connect(lambda: self.race_again(message))
        self.panel.show()
        self.panel.start()
        return self.panel

    def _show_progress(self, total: int) -> None:
        self._close_progress()
        self.progress = RaceProgressDialog(total, self.parent_widget)
        self.progress.cancel_requested.connect(self.races.cancel)
        self.progress.show()

    def _on_progress(self, progress: RaceProgress) -> None:
        if self.progress is not None:
            self.progress.show_progress(progress)

    def _close_progress(self) -> None:
        if self.progress is not None:
            self.progress.hide()
            self.progress.deleteLater()
            self.progress = None
