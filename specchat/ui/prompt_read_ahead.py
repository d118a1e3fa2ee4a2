"""Reading the composer's prompt ahead: while the user writes and the runtime is idle, the models read it.

A pause in typing (:data:`READ_AHEAD_DELAY_MS`) asks the runtime's thread to
read the prompt a reply would get (the history and the message being written,
built as Send builds it: :meth:`ComposerFiles.messages`) into the target's and
the draft model's contexts (:mod:`specchat.core.runtime.read_ahead`). Every
change to the message, a conversation switch, a load and Send stop it within
one chunk (Send and a load through the host, a served request on the worker);
the next pause reads on from what the contexts still share with the new
prompt. Nothing is read while a reply streams, a pair loads or the setting is
off. A finished read says so, quietly, in an empty status bar.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QStatusBar

from .composer_files import ComposerFiles
from .worker import ReadAheadDone, ReadAheadRequest, WindowRuntimeHost

READ_AHEAD_DELAY_MS = 400  # typing pauses this long before the prompt is read ahead
HINT = "Prompt read ahead"
HINT_MS = 2500


class PromptReadAhead(QObject):
    """Reads the composer's prompt ahead on the runtime's thread (see the module docstring)."""

    done = Signal(object)  # ReadAheadDone of the latest request: finished, or stopped
    chunk_read = Signal(str, int, int)  # the latest request's progress: context, tokens held, of how many

    def __init__(
        self,
        host: WindowRuntimeHost,
        files: ComposerFiles,
        *,
        enabled: bool,
        ready: Callable[[], bool],
        drafter: Callable[[], str],
        status: QStatusBar | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.host, self.files, self.enabled = host, files, enabled
        self.ready, self.drafter, self.status = ready, drafter, status
        self.serial = 0
        self.last: ReadAheadDone | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(READ_AHEAD_DELAY_MS)
        self._timer.timeout.connect(self.start_now)
        files.composer.textChanged.connect(self.changed)
        files.tray.changed.connect(self.changed)
        host.worker.read_ahead_done.connect(self._on_done)
        host.worker.read_ahead_chunk.connect(self._on_chunk)

    def set_enabled(self, enabled: bool) -> None:
        """The setting: off stops a read under way and reads nothing more."""
        self.enabled = enabled
        if enabled:
            self.changed()
        else:
            self.stop()

    def changed(self) -> None:
        """The prompt changed (the message, its files, the conversation, the pair): stop, read after a pause."""
        self.stop()
        if self.enabled:
            self._timer.start()

    def stop(self) -> None:
        """Stop a read under way (within one chunk) and one waiting for the pause."""
        self._timer.stop()
        self.host.stop_read_ahead()

    def start_now(self) -> None:
        """Read the composer's prompt ahead now, where there is one and nothing else needs the runtime."""
        self._timer.stop()
        if not self.enabled or not self.ready():
            return
        messages = self.files.messages()
        if not messages[-1]["content"]:
            return
        self.serial += 1
        self.host.read_ahead(ReadAheadRequest(self.serial, messages, self.drafter()))

    def _on_chunk(self, serial: int, context: str, held: int, total: int) -> None:
        if serial == self.serial:
            self.chunk_read.emit(context, held, total)

    def _on_done(self, done: ReadAheadDone) -> None:
        if done.serial != self.serial:
            return  # a newer request is on its way
        self.last = done
        if done.read.finished and done.read.read and self.status is not None and not self.status.currentMessage():
            self.status.showMessage(HINT, HINT_MS)
        self.done.emit(done)
