"""The model picker's verdict thread: one for the whole app, outliving every picker.

A picker asks for the facts on its pair (:func:`specchat.core.models.pair_facts.pair_facts`) each time a field
changes; the one thread works on the latest question only (a newer one replaces the one waiting) and the answer
comes back on the GUI thread to the picker that asked last, if it is still open. A picker that closes forgets
its question, so a late answer is dropped and no signal reaches a deleted dialog.
"""

from __future__ import annotations

from collections.abc import Callable

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, Signal

from specchat.core.latest_worker import LatestWorker
from specchat.core.models.pair_facts import PairFacts, PairQuestion, pair_facts

Judge = Callable[[PairQuestion], PairFacts]
Answer = Callable[[PairFacts], None]


class PairVerdicts(QObject):
    """Answers pickers' questions on one thread, the latest question only."""

    _answered = Signal(int, object)  # ticket, PairFacts: emitted on the worker thread, received on the GUI's

    def __init__(self, judge: Judge = pair_facts, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._worker: LatestWorker[PairQuestion, PairFacts] = LatestWorker(judge, self._emit, "pair-verdicts")
        self._asker: tuple[int, QObject, Answer] | None = None
        self._answered.connect(self._deliver)

    def ask(self, owner: QObject, question: PairQuestion, answer: Answer) -> None:
        """Judge ``question``; ``answer(facts)`` runs on the GUI thread unless a newer question comes first or
        ``owner`` is deleted or calls :meth:`forget`."""
        self._asker = (self._worker.submit(question), owner, answer)

    def pending(self, owner: QObject) -> bool:
        """Whether ``owner`` is waiting for an answer."""
        return self._asker is not None and self._asker[1] is owner

    def forget(self, owner: QObject) -> None:
        """``owner`` closes: drop its question, and any answer to it still on the way."""
        if self.pending(owner):
            self._asker = None
            self._worker.drop()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until the thread has no question left (its last answer sent or dropped); False on timeout."""
        return self._worker.wait_idle(timeout)

    def stop(self, timeout: float = 0.0) -> bool:
        """End the thread (after the question it is on); True once it has ended."""
        self._asker = None
        return self._worker.stop(timeout)

    def _emit(self, ticket: int, facts: PairFacts) -> None:
        if shiboken6.isValid(self):  # the app is not being torn down
            self._answered.emit(ticket, facts)

    def _deliver(self, ticket: int, facts: object) -> None:
        asker = self._asker
        if asker is None or asker[0] != ticket:
            return  # a newer question was asked, or the asker closed
        self._asker = None
        if shiboken6.isValid(asker[1]) and isinstance(facts, PairFacts):
            asker[2](facts)


_shared: PairVerdicts | None = None


def shared_verdicts() -> PairVerdicts:
    """The app's verdict thread, made on first use and stopped when the app quits."""
    global _shared
    if _shared is None:
        _shared = PairVerdicts()
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(_stop_shared)
    return _shared


def _stop_shared() -> None:
    global _shared
    if _shared is not None:
        _shared.stop()
        _shared = None
