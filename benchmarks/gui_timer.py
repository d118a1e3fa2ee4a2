"""A 10 ms timer on the GUI thread that records the gaps between its ticks: how long the window stalled."""

from __future__ import annotations

from PySide6.QtCore import QElapsedTimer, QObject, QTimer


class GapTimer(QObject):
    """``start()``, run the work, then read ``gaps`` (milliseconds between ticks; 10 when nothing stalls)."""

    def __init__(self, interval_ms: int = 10) -> None:
        super().__init__()
        self.gaps: list[float] = []
        self._clock = QElapsedTimer()
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)

    def _tick(self) -> None:
        if self._clock.isValid():
            self.gaps.append(self._clock.nsecsElapsed() / 1e6)
        self._clock.restart()

    def start(self) -> None:
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()
