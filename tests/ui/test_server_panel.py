"""Serving the window's loaded pair on 127.0.0.1: a real ``openai`` request shows in the Server panel with its
fates, the window's reply and a served request take turns on the one engine, and the server stops with the pair."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from PySide6.QtCore import Qt

from specchat.core.chat.store import ConversationStore
from specchat.core.types import Finished, TokenKind
from specchat.server.engine_host import Started
from specchat.ui.main_window import MainWindow
from specchat.ui.token_styles import PROP_KIND
from support.api_clients import client, close_all

LOAD_TIMEOUT = 120_000
REPLY_TIMEOUT = 300_000


class Served:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url


def fates_drawn(window: MainWindow) -> set[str]:
    """The token kinds the panel's text is drawn with."""
    kinds: set[str] = set()
    block = window.serving.panel.text.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            kind = it.fragment().charFormat().property(PROP_KIND)
            if kind:
                kinds.add(kind)
            it += 1
        block = block.next()
    return kinds


@pytest.fixture
def window(qtbot, settings, demo_pair, tmp_path: Path):
    settings.max_tokens = 32
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    assert not window.serving.action.isEnabled()  # nothing loaded: nothing to serve
    with qtbot.waitSignal(window.models_loaded, timeout=LOAD_TIMEOUT):
        window.load_models(demo_pair.target, demo_pair.draft)
    assert window.serving.action.isEnabled()
    yield window
    close_all()
    window.close()
    store.close()


@pytest.mark.slow
def test_a_served_request_shows_in_the_panel_with_its_fates_and_stops(qtbot, window: MainWindow) -> None:
    url = window.serving.start(0)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    assert window.serving.note.text() == f"Serving on {url}" and window.serving.action.isChecked()
    reply = client(Served(url)).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Count from one to ten."}], max_tokens=32, temperature=0)
    text = reply.choices[0].message.content
    assert text
    panel = window.serving.panel
    qtbot.waitUntil(lambda: bool(panel.requests) and panel.requests[0].done, timeout=60_000)
    served = panel.requests[0]
    assert served.status in ("eos", "max_tokens"), served.status
    assert served.client.startswith("127.0.0.1:") and served.endpoint == "/v1/chat/completions"
    assert served.generated == reply.usage.completion_tokens
    assert "".join(p for k, p in served.spans if k is not TokenKind.REJECTED) == text
    assert panel.table.rowCount() == 1 and panel.table.item(0, 1).text() == "/v1/chat/completions"
    assert panel.table.item(0, 2).text() == str(served.generated)
    assert panel.text.toPlainText() == "".join(p for _, p in served.spans)
    assert TokenKind.TARGET.value in fates_drawn(window)
    assert any(k is TokenKind.ACCEPTED for k, _ in served.spans) == (TokenKind.ACCEPTED.value in fates_drawn(window))

    window.serving.action.trigger()  # checked: the menu entry stops the server
    assert not window.serving.serving and not window.serving.note.isVisible()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models", timeout=5)

    window.serving.start(0)  # a pair going away stops the server first
    window.host.worker.load_failed.emit("gone")
    assert not window.serving.serving and not window.serving.action.isEnabled()


@pytest.mark.slow
def test_the_window_reply_and_a_served_request_never_decode_at_once(qtbot, window: MainWindow) -> None:
    url = window.serving.start(0)
    spans: dict[str, list[float]] = {"window": [], "served": []}  # when each side's events left the engine

    def window_events(batch: list[object]) -> None:
        spans["window"].append(time.monotonic())

    def served_event(_job: object, event: object) -> None:
        if isinstance(event, (Started, Finished)):
            spans["served"].append(time.monotonic())

    # Direct: run on the emitting (engine) thread, so the times are when the engine produced them.
    window.host.worker.events.connect(window_events, Qt.ConnectionType.DirectConnection)
    window.serving.heard.connect(served_event, Qt.ConnectionType.DirectConnection)
    answers: list[str] = []
    request = threading.Thread(target=lambda: answers.append(client(Served(url)).completions.create(
        model="m", prompt="Once upon a time", max_tokens=32, temperature=0).choices[0].text))
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT):
        window.send("List the days of the week, one per line.")
        request.start()
        qtbot.waitUntil(lambda: len(spans["window"]) > 0 or len(spans["served"]) > 0, timeout=REPLY_TIMEOUT)
    qtbot.waitUntil(lambda: not request.is_alive(), timeout=REPLY_TIMEOUT)
    request.join()
    assert answers and answers[0] and window.transcript.messages[-1].content
    w, s = spans["window"], spans["served"]
    assert len(s) == 2 and len(w) >= 2
    # One after the other: the served request's run lies wholly before or wholly after the reply's.
    assert s[1] < w[0] or w[-1] < s[0], (w, s)
    window.host.worker.events.disconnect(window_events)
