"""The chat view's event queue: engine events (already folded into the transcript) wait here and are drawn
together on a short timer, so a fast reply costs one layout per ~30 ms rather than one per token."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer

from .chat_page import StreamEvent

FLUSH_MS = 30


class EventQueue:
    """Events waiting to be drawn; ``due`` is called once :data:`FLUSH_MS` after the first of them arrived."""

    def __init__(self, parent: QObject, due: Callable[[], None]) -> None:
        self._events: list[StreamEvent] = []
        self._timer = QTimer(parent)
        self._timer.setSingleShot(True)
        self._timer.setInterval(FLUSH_MS)
        self._timer.timeout.connect(due)

    def push(self, events: list[StreamEvent]) -> None:
        """Queue ``events``; the timer starts if it is not running."""
        self._events.extend(events)
        if self._events and not self._timer.isActive():
            self._timer.start()

    def take(self) -> list[StreamEvent]:
        """Stop the timer and hand over what is queued (the queue is then empty)."""
        self._timer.stop()
        events, self._events = self._events, []
        return events

    def clear(self) -> None:
        """Drop what is queued (the transcript was drawn whole, or another one is shown)."""
        self._timer.stop()
        self._events.clear()

    def discard(self) -> None:
        """Drop what is queued, leaving the timer as it is (a reply found finished while redrawing)."""
        self._events.clear()
