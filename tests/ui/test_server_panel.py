"""Serving the window's loaded pair on 127.0.0.1: a real ``openai`` request shows in the Server panel with its
fates, the window's reply and a served request take turns on the one runtime (the window says when its reply
waits), the dialog's port and key are used and remembered, and the server stops with the pair."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from specchat.core.chat.store import ConversationStore
from specchat.core.settings import load_settings, settings_path
from specchat.core.types import Finished, TokenKind
from specchat.server.request_queue import Started
from specchat.ui.main_window import MainWindow
from specchat.ui.serve_dialog import ServeDialog
from specchat.ui.status_progress import WAITING_FOR_SERVER
from specchat.ui.token_styles import PROP_KIND
from support.api_clients import client, close_all, usage_of
from support.qt_items import table_cell

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
    assert window.serving.note.text() == f"Serving on {url}, up to 2 requests at once"  # the default
    assert window.serving.action.isChecked()
    reply = client(Served(url)).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Count from one to ten."}], max_tokens=32, temperature=0
    )
    text = reply.choices[0].message.content
    assert text
    panel = window.serving.panel
    qtbot.waitUntil(lambda: bool(panel.requests) and panel.requests[0].done, timeout=60_000)
    served = panel.requests[0]
    assert served.status in ("eos", "max_tokens"), served.status
    assert served.client.startswith("127.0.0.1:") and served.endpoint == "/v1/chat/completions"
    assert served.generated == usage_of(reply).completion_tokens
    assert "".join(p for k, p in served.spans if k is not TokenKind.REJECTED) == text
    assert panel.table.rowCount() == 1 and table_cell(panel.table, 0, 1).text() == "/v1/chat/completions"
    assert table_cell(panel.table, 0, 2).text() == str(served.generated)
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
    url = window.serving.start(0, parallel=1)  # one at a time (batched, Automatic's reply joins the request)
    spans: dict[str, list[float]] = {"window": [], "served": []}  # when each side's events left the runtime

    def window_events(batch: list[object]) -> None:
        spans["window"].append(time.monotonic())

    def served_event(_job: object, event: object) -> None:
        if isinstance(event, (Started, Finished)):
            spans["served"].append(time.monotonic())

    # Direct: run on the emitting (runtime) thread, so the times are when the runtime produced them.
    window.host.worker.events.connect(window_events, Qt.ConnectionType.DirectConnection)
    window.serving.heard.connect(served_event, Qt.ConnectionType.DirectConnection)
    answers: list[str] = []
    request = threading.Thread(
        target=lambda: answers.append(
            client(Served(url))
            .completions.create(model="m", prompt="Once upon a time", max_tokens=32, temperature=0)
            .choices[0]
            .text
        )
    )
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT):
        window.send("List the days of the week, one per line.")
        request.start()
        qtbot.waitUntil(lambda: len(spans["window"]) > 0 or len(spans["served"]) > 0, timeout=REPLY_TIMEOUT)
    qtbot.waitUntil(lambda: not request.is_alive(), timeout=REPLY_TIMEOUT)
    request.join()
    # The client can hold its whole answer before the runtime's thread reports the request finished.
    qtbot.waitUntil(lambda: len(spans["served"]) >= 2, timeout=REPLY_TIMEOUT)
    assert answers and answers[0] and window.transcript.messages[-1].content
    w, s = spans["window"], spans["served"]
    assert len(s) == 2 and len(w) >= 2
    # One after the other: the served request's run lies wholly before or wholly after the reply's.
    assert s[1] < w[0] or w[-1] < s[0], (w, s)
    window.host.worker.events.disconnect(window_events)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def open_dialog(qtbot, window: MainWindow) -> ServeDialog:
    window.serving.action.trigger()
    dialog = window.serving.dialog
    assert dialog is not None and window.serving.action.isChecked()
    qtbot.waitUntil(dialog.isVisible)
    return dialog


@pytest.mark.slow
def test_the_dialog_serves_with_a_key_that_requests_must_send_and_remembers_it(qtbot, window: MainWindow) -> None:
    dialog = open_dialog(qtbot, window)
    assert dialog.port.value() == 8080 and not dialog.require_key.isChecked() and not dialog.key.isEnabled()
    port = free_port()
    dialog.port.setValue(port)
    dialog.require_key.setChecked(True)  # an empty field gets a generated key
    first = dialog.key.text()
    assert first.startswith("sk-local-") and len(first) > 30
    dialog.generate.click()
    key = dialog.key.text()
    assert key.startswith("sk-local-") and key != first
    assert dialog.url.text() == f"http://127.0.0.1:{port}/v1  (key required)"
    dialog.ok.click()
    assert window.serving.dialog is None and window.serving.serving and window.serving.action.isChecked()
    url = f"http://127.0.0.1:{port}/v1"
    assert window.serving.url == url
    assert window.serving.note.text() == f"Serving on {url}, up to 2 requests at once (key required)"

    assert httpx.get(f"{url}/models", timeout=30).status_code == 401
    assert httpx.get(f"{url}/models", headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 401
    answer = httpx.post(
        f"{url}/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
        json={"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
    )
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]

    panel = window.serving.panel
    assert "key required" in panel.address.text() and url in panel.address.text()
    assert panel.copy_url.isVisibleTo(panel) and panel.copy_key.isVisibleTo(panel)
    panel.copy_key.click()
    assert QGuiApplication.clipboard().text() == key
    panel.copy_url.click()
    assert QGuiApplication.clipboard().text() == url

    stored = json.loads(settings_path().read_text(encoding="utf-8"))  # written at once, not only on close
    assert (stored["serve_port"], stored["serve_require_key"], stored["serve_api_key"]) == (port, True, key)
    window.serving.action.trigger()  # stops
    assert not window.serving.serving and panel.address.text() == "Not serving"
    assert not panel.copy_url.isVisibleTo(panel) and not panel.copy_key.isVisibleTo(panel)

    dialog = open_dialog(qtbot, window)  # remembered: the same port and key
    assert (dialog.port.value(), dialog.require_key.isChecked(), dialog.key.text()) == (port, True, key)
    dialog.require_key.setChecked(False)  # serve without a key; the key stays kept for next time
    dialog.ok.click()
    assert httpx.get(f"{url}/models", timeout=30).status_code == 200
    assert "no key" in panel.address.text() and not panel.copy_key.isVisibleTo(panel)
    saved = load_settings()
    assert (saved.serve_require_key, saved.serve_api_key) == (False, key)
    window.serving.stop()

    dialog = open_dialog(qtbot, window)  # Cancel: nothing served, the entry unchecked
    dialog.reject()
    assert window.serving.dialog is None and not window.serving.serving and not window.serving.action.isChecked()


@pytest.mark.slow
def test_a_port_in_use_is_one_status_line_and_the_entry_stays_unchecked(qtbot, window: MainWindow) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        dialog = open_dialog(qtbot, window)
        dialog.port.setValue(port)
        dialog.ok.click()
        message = window.statusBar().currentMessage()
        assert message.startswith("Not serving: ") and f"127.0.0.1:{port}" in message and "\n" not in message
        assert not window.serving.serving and not window.serving.action.isChecked()
        assert not window.serving.note.isVisible() and window.serving.panel.address.text() == "Not serving"
    assert load_settings().serve_port == port  # what was asked for is kept: it works once the port is free


LONG_REQUEST = {"model": "m", "prompt": "1, 2, 3, 4, 5, 6, 7,", "max_tokens": 2000, "temperature": 0, "stream": True}


def serving_and_listening(window: MainWindow) -> tuple[str, list[bool]]:
    """Serve on a free port one request at a time; the base URL and the host's waiting signals as they come."""
    window.settings.max_tokens = 8
    url = window.serving.start(0, parallel=1)
    said: list[bool] = []
    window.host.waiting.connect(said.append)
    return url, said


@pytest.mark.slow
def test_a_window_reply_says_it_waits_for_a_served_request_until_it_starts(qtbot, window: MainWindow) -> None:
    url, said = serving_and_listening(window)
    status = window.statusBar()
    at_first_batch: list[str] = []  # the status line when the reply's first events are drawn
    window.chat.events_folded.connect(
        lambda _batch: None if at_first_batch else at_first_batch.append(status.currentMessage())
    )
    with httpx.stream("POST", f"{url}/completions", json=LONG_REQUEST, timeout=120) as served:
        # An answer at all: the request has started, so it holds the runtime (for up to 2000 tokens).
        assert served.status_code == 200
        assert window.serving.serve_host is not None and window.serving.serve_host.busy
        window.send("Say hello.")
        qtbot.waitUntil(lambda: status.currentMessage() == WAITING_FOR_SERVER, timeout=REPLY_TIMEOUT)
        assert not window.progress.isHidden() and said == [True]
        reply = window.transcript.messages[-1]
        assert reply.role == "assistant" and not reply.content  # nothing decoded for the window yet
    # The client went away: its request ends within a round, the window's reply gets the runtime and starts.
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT):
        qtbot.waitUntil(lambda: said == [True, False], timeout=REPLY_TIMEOUT)
    assert at_first_batch and at_first_batch[0] != WAITING_FOR_SERVER
    assert status.currentMessage() != WAITING_FOR_SERVER and window.progress.isHidden()
    assert window.transcript.messages[-1].content
    qtbot.waitUntil(
        lambda: bool(window.serving.panel.requests) and window.serving.panel.requests[0].done, timeout=REPLY_TIMEOUT
    )
    assert window.serving.panel.requests[0].status == "cancelled"


@pytest.mark.slow
def test_stop_ends_a_window_reply_that_waits_for_a_served_request(qtbot, window: MainWindow) -> None:
    url, said = serving_and_listening(window)
    status = window.statusBar()
    with httpx.stream("POST", f"{url}/completions", json=LONG_REQUEST, timeout=120) as served:
        assert served.status_code == 200
        window.send("Say hello.")
        qtbot.waitUntil(lambda: status.currentMessage() == WAITING_FOR_SERVER, timeout=REPLY_TIMEOUT)
        assert window.page.stop_button.isEnabled()
        # Stop ends the wait at once; the served request, still streaming, keeps the runtime.
        with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT):
            window.page.stop_button.click()
        assert said == [True, False]
        assert window.serving.serve_host is not None and window.serving.serve_host.busy
        assert status.currentMessage() != WAITING_FOR_SERVER and window.progress.isHidden()
        assert not window.transcript.messages[-1].content
        assert not window.page.stop_button.isEnabled()
        lines = served.iter_lines()
        assert any(line.startswith("data: ") for line in lines)  # it still streams
