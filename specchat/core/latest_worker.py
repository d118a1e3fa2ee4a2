"""One background thread that works on the latest request only.

For answers that follow what a user types: each new request replaces the one
still waiting, so at most one runs and one waits however fast requests come,
and an answer is delivered only while its request is still the latest.
Nothing here knows about Qt; ``deliver`` is called on the worker's thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Res = TypeVar("Res")


class LatestWorker(Generic[Req, Res]):
    """Runs ``work(request)`` on one daemon thread for the latest submitted request and hands the result to
    ``deliver(ticket, result)``; a result whose ticket is no longer the latest is dropped."""

    def __init__(self, work: Callable[[Req], Res], deliver: Callable[[int, Res], None], name: str) -> None:
        self._work, self._deliver, self._name = work, deliver, name
        self._cond = threading.Condition()
        self._pending: tuple[int, Req] | None = None
        self._latest = 0
        self._stopped = False
        self._busy = False  # on a request (its answer not yet delivered or dropped)
        self._thread: threading.Thread | None = None

    @property
    def latest(self) -> int:
        """The ticket of the newest request (0 before the first)."""
        with self._cond:
            return self._latest

    def submit(self, request: Req) -> int:
        """Queue ``request`` in place of any that has not started yet; returns its ticket."""
        with self._cond:
            if self._stopped:
                raise RuntimeError(f"{self._name} was stopped")
            self._latest += 1
            self._pending = (self._latest, request)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return self._latest

    def drop(self) -> None:
        """Forget the waiting request, and the answer to the running one."""
        with self._cond:
            self._latest += 1
            self._pending = None

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no request waits or runs (the last answer delivered or dropped); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout)

    def stop(self, timeout: float = 0.0) -> bool:
        """End the thread after the request it is on (nothing more is delivered); True once it has ended."""
        with self._cond:
            self._stopped = True
            self._pending = None
            self._cond.notify_all()
            thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                assert self._pending is not None
                ticket, request = self._pending
                self._pending, self._busy = None, True
            try:
                self._answer(ticket, request)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _answer(self, ticket: int, request: Req) -> None:
        try:
            result = self._work(request)
        except Exception:  # a failed request must not end the thread that serves the next one
            log.exception("%s: request %d failed", self._name, ticket)
            return
        with self._cond:
            current = ticket == self._latest and not self._stopped
        if current:
            self._deliver(ticket, result)
