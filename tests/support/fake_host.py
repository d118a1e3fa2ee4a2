"""A stand-in for the window's runtime host: the same signals and calls, no thread and no model.

Tests load a pretend pair with ``loaded()`` and play engine events with
``worker.events.emit(batch)``; every request the window sends is kept.
"""

from __future__ import annotations

from typing import Any, cast

from PySide6.QtCore import QObject, Signal

from specchat.core.cancel import CancelToken
from specchat.core.chat.race import RaceRequest
from specchat.ui.main_window import MainWindow
from specchat.ui.worker import (
    LoadOptions,
    ModelInfo,
    ReadAheadRequest,
    ReplyRequest,
    TokenCountRequest,
    WindowRuntimeHost,
)


class FakeWorker(QObject):
    load_progress = Signal(str, float)
    loaded = Signal(object)
    load_failed = Signal(str)
    events = Signal(list)
    prompt_progress = Signal(int, int)
    failed = Signal(str)
    baseline_measured = Signal(object)
    raced = Signal(object, object)
    race_failed = Signal(object, str)
    race_progress = Signal(object, object)
    waiting = Signal(bool)  # a reply waits for a served request (True), got the runtime (False)
    waiting_because = Signal(str)  # just before waiting(True): why the reply could not join the served batch
    tokens_counted = Signal(object)  # TokenCount (answer a count request with worker.tokens_counted.emit)
    read_ahead_chunk = Signal(int, str, int, int)  # serial, context, held, of how many
    read_ahead_done = Signal(object)  # ReadAheadDone (answer a read ahead with worker.read_ahead_done.emit)


class FakeHost(QObject):
    """Records what the window asks of the runtime."""

    waiting = Signal(bool)  # as the real host's: the worker's, on the GUI thread
    waiting_because = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.worker = FakeWorker(self)
        self.worker.waiting_because.connect(self.waiting_because)
        self.worker.waiting.connect(self.waiting)
        self.requests: list[ReplyRequest] = []
        self.tokens: list[CancelToken] = []
        self.loads: list[tuple[str, str]] = []
        self.calibrations: list[str] = []  # baseline keys the window asked to measure
        self.races: list[RaceRequest] = []  # plain runs the window asked for (answer with worker.raced.emit)
        self.closed = False
        self.lookup_memory: list[str] | None = None  # the lookup memory's texts last handed over
        self.lookup_memory_calls = 0
        self.counts: list[TokenCountRequest] = []  # the composer's prompts the window asked to count
        self.read_aheads: list[ReadAheadRequest] = []  # the composer's prompts the window asked to read ahead
        self.read_ahead_tokens: list[CancelToken] = []

    def loaded(self, draft: bool = True, parts: frozenset[str] | None = None) -> ModelInfo:
        """Say a pair finished loading (``parts``: what it offers drafters, if not a draft model or nothing)."""
        info = ModelInfo(
            "/models/target.gguf",
            "/models/draft.gguf" if draft else "",
            "target.gguf",
            "draft.gguf" if draft else None,
            n_ctx=4096,
            parts=parts,
        )
        self.worker.loaded.emit(info)
        return info

    def load(self, target: str, draft: str = "", options: LoadOptions | None = None) -> None:
        self.loads.append((target, draft))

    def load_demo(self, options: LoadOptions | None = None) -> None:
        self.loads.append(("demo", "demo"))

    def set_lookup_memory(self, texts: list[str] | None) -> None:
        self.lookup_memory = texts
        self.lookup_memory_calls += 1

    def generate(self, request: ReplyRequest) -> CancelToken:
        self.requests.append(request)
        token = CancelToken()
        self.tokens.append(token)
        return token

    def count_tokens(self, request: TokenCountRequest) -> None:
        self.counts.append(request)

    def read_ahead(self, request: ReadAheadRequest) -> CancelToken:
        self.stop_read_ahead()
        self.read_aheads.append(request)
        token = CancelToken()
        self.read_ahead_tokens.append(token)
        return token

    def stop_read_ahead(self) -> None:
        for token in self.read_ahead_tokens:
            token.cancel()

    def measure_baseline(self, key: str, sampler: object) -> None:
        self.calibrations.append(key)

    def race(self, request: RaceRequest) -> CancelToken:
        self.races.append(request)
        token = CancelToken()
        self.tokens.append(token)
        return token

    def cancel(self) -> None:
        for token in self.tokens:
            token.cancel()

    def as_host(self) -> WindowRuntimeHost:
        """This stand-in where the window takes its host: it has the members the window uses (duck typing)."""
        return cast(WindowRuntimeHost, self)

    def shutdown(self) -> None:
        self.closed = True
        self.cancel()


def window_with(qtbot: Any, settings: Any, store: Any, *, loaded: bool = True) -> tuple[MainWindow, FakeHost]:
    """The real main window on a fake host (loaded unless ``loaded=False``), closed with the test."""
    host = FakeHost()
    window = MainWindow(settings, store, host=host.as_host())
    qtbot.addWidget(window)
    if loaded:
        host.loaded()
    return window, host


def two_versions(qtbot: Any, window: MainWindow, host: FakeHost) -> None:
    """Ask for a colour, answer "Red", regenerate and answer "Blue": the reply then has versions 1/2 and 2/2."""
    from specchat.core.types import Finished, FinishReason, GenerationStats
    from support.events import verified

    window.send("Name a colour")
    for text, last in (("Re", "d"), ("Blu", "e")):
        if last == "e":
            window.regenerate()
        with qtbot.waitSignal(window.reply_finished):
            host.worker.events.emit([verified(0, (text,), (), last), Finished(FinishReason.EOS, GenerationStats())])
