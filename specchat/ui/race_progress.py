"""The race while it runs: which block, how far each run has come, its rates so far, and Cancel."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from specchat.core.chat.race import RaceProgress
from specchat.core.chat.race_record import SPECULATIVE


def rate(tokens: int, seconds: float) -> str:
    return f"{tokens / seconds:.1f} tokens/s" if seconds > 0 and tokens > 0 else "–"


class RaceProgressDialog(QDialog):
    """Progress of a running race (both runs' tokens on one bar) with a Cancel that stores nothing."""

    cancel_requested = Signal()

    def __init__(self, total: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Racing speculative against plain decoding")
        self.setWindowModality(Qt.WindowModality.NonModal)
        self.total = max(1, total)
        self.stage = QLabel("Starting: reading the prompt…")
        self.bar = QProgressBar()
        self.bar.setRange(0, 2 * self.total)  # both runs decode the reply's length
        self.bar.setValue(0)
        self.runs = QLabel("")
        self.explain = QLabel(
            "The two runs take turns in short blocks, so a change in this machine's speed slows both alike."
        )
        self.explain.setWordWrap(True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the race: nothing is stored and the conversation stays as it is")
        self.cancel_button.clicked.connect(self.cancel)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.stage)
        layout.addWidget(self.bar)
        layout.addWidget(self.runs)
        layout.addWidget(self.explain)
        layout.addLayout(buttons)
        self.resize(460, self.sizeHint().height())

    def show_progress(self, progress: RaceProgress) -> None:
        """Show how far the race has come."""
        side = "speculative" if progress.side == SPECULATIVE else "plain"
        self.stage.setText(f"Block {progress.block} of {progress.blocks}: {side} decoding")
        self.bar.setValue(min(2 * self.total, progress.spec_tokens + progress.plain_tokens))
        self.runs.setText(
            f"Speculative {progress.spec_tokens}/{progress.total} tokens "
            f"({rate(progress.spec_tokens, progress.spec_seconds)}) · "
            f"plain {progress.plain_tokens}/{progress.total} tokens "
            f"({rate(progress.plain_tokens, progress.plain_seconds)})"
        )

    def cancel(self) -> None:
        """Ask for the race to stop; the dialog closes once it has."""
        self.cancel_button.setEnabled(False)
        self.stage.setText("Cancelling…")
        self.cancel_requested.emit()

    def reject(self) -> None:  # Escape or the window's close button: the same as Cancel
        if self.cancel_button.isEnabled():
            self.cancel()
