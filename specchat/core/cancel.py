"""Cooperative cancellation shared by the engine and downloads."""

from __future__ import annotations

import threading


class CancelToken:
    """A flag one thread sets and another polls between units of work."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    def reset(self) -> None:
        self._event.clear()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()
