"""The status bar's progress bar: a load's stages, a long prompt read in tokens and percent, busy until the first
token."""

from __future__ import annotations

from PySide6.QtWidgets import QProgressBar, QStatusBar

WAITING_FOR_SERVER = "Waiting for a served request to finish…"
WAITING_OUTSIDE_BATCH = "Waiting for the served requests to finish: {why}…"
READING_PROMPT = "Reading the prompt…"


class StatusProgress(QProgressBar):
    """Shown while something runs that has no text in the chat yet; hidden otherwise."""

    def __init__(self, status: QStatusBar) -> None:
        super().__init__()
        self.status = status
        self.reading_prompt = False  # it shows how much of a long prompt was read
        self._why = ""  # why the next wait could not join the served requests' batch
        self.setRange(0, 100)
        self.setMaximumWidth(240)
        self.hide()
        status.addPermanentWidget(self)

    def start_load(self, message: str) -> None:
        self.status.showMessage(message)
        self.setValue(0)
        self.show()

    def load_stage(self, stage: str, fraction: float) -> None:
        self.setValue(int(fraction * 100))
        self.setFormat(f"{stage} %p%")

    def busy(self, message: str) -> None:
        """Busy with no measure of how far (until a reply's first token)."""
        self.setRange(0, 0)
        self.setFormat("")
        self.show()
        self.status.showMessage(message)

    def waiting_because(self, why: str) -> None:
        """The next wait's reason: the reply could not join the served requests' batch (``why``, a clause)."""
        self._why = why

    def engine_waiting(self, waiting: bool) -> None:
        """A reply waits while a served request decodes (True), or has the engine now (False: reading its prompt)."""
        if waiting:
            why, self._why = self._why, ""
            self.busy(WAITING_OUTSIDE_BATCH.format(why=why) if why else WAITING_FOR_SERVER)
        elif self.maximum() == 0:  # still busy: no token yet
            self.busy(READING_PROMPT)

    def prompt_read(self, done: int, total: int) -> None:
        """A long prompt is being read: how many tokens of how many, here and in the status bar (Esc stops)."""
        percent = min(100, done * 100 // total)
        self.reading_prompt = True
        self.setRange(0, 100)
        self.setValue(percent)
        self.setFormat(f"prompt {percent}%")
        self.show()
        self.status.showMessage(f"Reading the prompt: {done:,} of {total:,} tokens ({percent}%), Esc stops")

    def done_busy(self) -> None:
        """The first token came (or the reply ended): hide a busy or prompt-reading bar, not a load's."""
        if self.maximum() == 0 or self.reading_prompt:
            self.reading_prompt = False
            self.hide()
            self.setRange(0, 100)
            self.status.clearMessage()
