"""Serving from the window with requests at once: the window's reply joins the served requests' batch.

The real demo pair in a real window (offscreen), a real server on 127.0.0.1 started from it, real HTTP clients on
threads. A window reply sent while a served request streams decodes beside it in one batch (no waiting notice),
Stop ends only the window's sequence, a client that leaves ends only its own, and each reply is the one its
prompt gets alone: greedy output compared with plain decoding, a float tie told apart (support/identity.py).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import llama_cpp
import pytest
from PySide6.QtCore import Qt
from pytestqt.exceptions import TimeoutError as WaitTimeout

from specchat.core.cancel import CancelToken
from specchat.core.chat.attachments import Attachment
from specchat.core.chat.store import ConversationStore
from specchat.core.types import DrafterKind, Finished, FinishReason, GenerationParams, SamplerParams, Verified
from specchat.server.app import Api
from specchat.server.request_queue import RequestQueue, Started
from specchat.server.runner import ServerThread
from specchat.ui.main_window import MainWindow
from specchat.ui.pair_loading import PairLoader
from specchat.ui.server_panel import LocalServing
from specchat.ui.status_progress import WAITING_FOR_SERVER
from specchat.ui.worker import ReplyRequest, RuntimeWorker, batch_drafter, batch_refusal
from support.api_clients import close_all
from support.identity import assert_same_or_tie, plain_greedy
from support.stacks import CallLog, thread_stacks

LOAD_TIMEOUT = 120_000
REPLY_TIMEOUT = 300_000
SERVED_QUESTION = "Tell me a long story about a lighthouse keeper."  # it runs past SERVED_TOKENS
SERVED_TOKENS = 160  # at a fixed depth of 2, at least 54 rounds: the window's short reply ends well within them
WINDOW_TEXT = "List three colours."
WINDOW_TOKENS = 12
LONG_WINDOW_TEXT = "Write a long essay about the history of rivers."  # no end of its own for 200 tokens and more

CALLS = CallLog(keep=80)  # what cut a request short, when one is: who cancelled, stopped or closed what


@pytest.fixture(autouse=True)
def _calls(monkeypatch: pytest.MonkeyPatch) -> None:
    CALLS.lines.clear()
    for owner, name in (
        (CancelToken, "cancel"),
        (LocalServing, "stop"),
        (PairLoader, "_start"),
        (RuntimeWorker, "close_calls"),
        (RuntimeWorker, "_drop"),
        (RequestQueue, "stop_taking"),  # the batched queue's calls it too
        (ServerThread, "stop"),
        (Api, "stop"),  # a coroutine function: its call is logged, on the server's event loop
    ):
        CALLS.watch(monkeypatch, owner, name)


class ServedStream(threading.Thread):
    """A streamed greedy chat request on a thread of its own: its token ids (the fates extension), its text and
    finish reason; with ``leave``, the client closes the connection once that event is set."""

    def __init__(
        self, base_url: str, question: str, leave: threading.Event | None = None, max_tokens: int = SERVED_TOKENS
    ) -> None:
        super().__init__(daemon=True)
        self.base_url, self.question, self.leave, self.max_tokens = base_url, question, leave, max_tokens
        self.tokens: list[int] = []
        self.text = ""
        self.finish: str | None = None
        self.error: BaseException | None = None
        self.lines: list[str] = []  # the stream's last lines as received, for a failure's message

    def __repr__(self) -> str:
        return (
            f"ServedStream(finish={self.finish!r}, tokens={len(self.tokens)}, error={self.error!r}, "
            f"alive={self.is_alive()}, last lines={self.lines[-4:]!r})"
        )

    def run(self) -> None:
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": self.question}],
            "max_tokens": self.max_tokens,
            "temperature": 0,
            "stream": True,
            "speculative": {"fates": True, "depth": 2},
        }
        try:
            with (
                httpx.Client(timeout=REPLY_TIMEOUT / 1000) as http,
                http.stream("POST", f"{self.base_url}/chat/completions", json=body) as answer,
            ):
                if answer.status_code != 200:
                    answer.read()
                    self.lines = [f"HTTP {answer.status_code}: {answer.text[:300]}"]
                assert answer.status_code == 200
                for line in answer.iter_lines():
                    if self.leave is not None and self.leave.is_set():
                        return  # closes the connection mid-stream
                    if line:
                        self.lines = [*self.lines[-7:], line[:300]]
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[len("data: ") :])
                    if "error" in chunk:
                        self.error = RuntimeError(chunk["error"].get("message", chunk["error"]))
                    for choice in chunk.get("choices", []):
                        self.text += choice.get("delta", {}).get("content") or ""
                        fates = choice.get("specchat_fates") or []
                        self.tokens += [f["token"] for f in fates if f["fate"] != "rejected"]
                        self.finish = choice.get("finish_reason") or self.finish
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


@pytest.fixture
def window(qtbot, settings, demo_pair, tmp_path: Path):
    settings.max_tokens = WINDOW_TOKENS
    settings.temperature = 0.0
    settings.drafter = DrafterKind.NGRAM  # lookup joins the batch (a draft model would wait)
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.models_loaded, timeout=LOAD_TIMEOUT):
        window.load_models(demo_pair.target, demo_pair.draft)
    yield window
    close_all()
    window.serving.stop()
    window.close()
    store.close()


class Watch:
    """What the window and its server did, as the runtime's thread produced it: the window's events with their
    times, the served requests' starts and ends, every waiting signal and status line, the reply's request."""

    def __init__(self, window: MainWindow) -> None:
        self.window_events: list[tuple[float, object]] = []
        self.served: list[tuple[float, object]] = []
        self.waited: list[bool] = []
        self.statuses: list[str] = []
        self.requests: list[ReplyRequest] = []
        self.failures: list[str] = []
        # Direct: run on the emitting (runtime) thread, so the times are when the runtime produced them.
        window.host.worker.events.connect(self._events, Qt.ConnectionType.DirectConnection)
        window.serving.heard.connect(self._heard, Qt.ConnectionType.DirectConnection)
        window.host.waiting.connect(self.waited.append)
        window.host.worker.failed.connect(self.failures.append, Qt.ConnectionType.DirectConnection)
        window.statusBar().messageChanged.connect(self.statuses.append)
        generate = window.host.generate

        def recorded(request: ReplyRequest) -> Any:
            self.requests.append(request)
            return generate(request)

        window.host.generate = recorded  # type: ignore[method-assign]  # to see the reply's request

    def _events(self, batch: list[object]) -> None:
        now = time.monotonic()
        self.window_events += [(now, e) for e in batch]

    def _heard(self, _job: object, event: object) -> None:
        if isinstance(event, (Started, Finished)):
            self.served.append((time.monotonic(), event))

    @property
    def window_tokens(self) -> list[int]:
        return [t for _, e in self.window_events if isinstance(e, Verified) for t in e.committed]

    def describe(self) -> str:
        """What the window's reply got so far, for a failure's message."""
        kinds = [type(e).__name__ for _, e in self.window_events]
        ends = [e for _, e in self.window_events if isinstance(e, Finished)]
        return (
            f"window events: {kinds[-12:]} ({len(kinds)} in all), ends: {ends}, failures: {self.failures}, "
            f"waited: {self.waited}, statuses: {self.statuses[-6:]}, requests: {len(self.requests)}, "
            f"served: {[type(e).__name__ for _, e in self.served]}"
        )

    def window_finished(self) -> Finished:
        assert not self.failures, self.failures
        ends = [e for _, e in self.window_events if isinstance(e, Finished)]
        assert len(ends) == 1, ends
        return ends[0]


def wait_saying(qtbot, ready: Callable[[], bool], said: Callable[[], str]) -> None:
    """``qtbot.waitUntil(ready)``; when it times out, fail with ``said()`` and every thread's stack."""
    try:
        qtbot.waitUntil(ready, timeout=REPLY_TIMEOUT)
    except WaitTimeout:
        raise AssertionError(f"{said()}\n{thread_stacks()}") from None


class ReplyEndedError(Exception):
    """The window's reply ended (or never started) while the test still waited for its tokens."""


def wait_window_tokens(qtbot, window: MainWindow, watch: Watch, n: int, streams: Sequence[ServedStream] = ()) -> None:
    """Wait until the window's reply has committed ``n`` tokens; fail at once, saying what it and the server got,
    if it ended first."""

    def said() -> str:
        return f"{watch.describe()}; streams: {list(streams)}; panel: {panel_rows(window)}\n{CALLS}"

    def ready() -> bool:
        if len(watch.window_tokens) >= n:
            return True
        if watch.failures or any(isinstance(e, Finished) for _, e in watch.window_events):
            raise ReplyEndedError(said())
        return False

    wait_saying(qtbot, ready, said)


class StreamsEndedError(Exception):
    """Every served stream ended while the test still waited to see them live (raised through waitUntil)."""


def panel_rows(window: MainWindow) -> list[tuple[str, int, bool, bool]]:
    """The server panel's requests, each as (status, tokens generated, live, done), for a failure's message."""
    return [(r.status, r.generated, r.live, r.done) for r in window.serving.panel.requests]


def wait_streaming(qtbot, window: MainWindow, streams: list[ServedStream], condition: Any) -> None:
    """Wait until ``condition()``; fail at once, saying what each stream and the panel got, if every stream has
    ended first (rather than wait out the timeout)."""

    def said() -> str:
        return f"streams: {streams}; panel: {panel_rows(window)}\n{CALLS}"

    def ready() -> bool:
        if condition():
            return True
        if not any(s.is_alive() for s in streams):
            raise StreamsEndedError(said())
        return False

    wait_saying(qtbot, ready, said)


def serve_one(qtbot, window: MainWindow, leave: threading.Event | None = None) -> tuple[Watch, ServedStream]:
    """Serve from ``window`` two at a time and stream one long served request, watched, until the panel shows it
    live (with ``leave``, its client goes once that is set)."""
    url = window.serving.start(0, parallel=2)
    watch = Watch(window)
    served = ServedStream(url, SERVED_QUESTION, leave)
    served.start()
    wait_streaming(qtbot, window, [served], lambda: live_served(window))
    return watch, served


def live_served(window: MainWindow, n: int = 1) -> bool:
    """Whether ``n`` served requests are decoding and each has shown text in the panel."""
    live = [r for r in window.serving.panel.requests if r.live and r.spans]
    return len(live) >= n


def check_greedy(runtime, messages: list[dict[str, str]], got: list[int], sampler: SamplerParams, n: int) -> None:
    """``got`` is what plain greedy decoding of the target gives ``messages``, or parts from it at a tie."""
    prompt = runtime.prompt(messages).tokens
    plain = plain_greedy(runtime.target_context, prompt, n, sampler, runtime.target.eog_tokens)
    assert_same_or_tie(runtime.target_context, prompt, plain, got, sampler, label=str(messages))


@pytest.mark.slow
def test_a_window_reply_joins_a_running_served_request_and_ends_first(qtbot, window: MainWindow, demo_runtime):
    url = window.serving.start(0, parallel=2)
    assert "up to 2 requests at once" in window.serving.note.text()
    watch = Watch(window)
    served = ServedStream(url, SERVED_QUESTION)
    served.start()
    wait_streaming(qtbot, window, [served], lambda: live_served(window))
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT):
        window.send(WINDOW_TEXT)
    qtbot.waitUntil(lambda: not served.is_alive(), timeout=REPLY_TIMEOUT)
    assert served.error is None and served.finish == "length" and len(served.tokens) == SERVED_TOKENS, (
        served,
        panel_rows(window),
        [type(e).__name__ for _, e in watch.served],
        str(CALLS),
    )

    # The reply decoded inside the served request's run, and never waited for it.
    (started_at, _), (ended_at, ended) = watch.served
    assert isinstance(ended, Finished) and ended.reason is FinishReason.MAX_TOKENS
    first, last = watch.window_events[0][0], watch.window_events[-1][0]
    assert started_at < first and last < ended_at, (started_at, first, last, ended_at)
    assert watch.waited == [] and WAITING_FOR_SERVER not in watch.statuses
    assert not any(s.startswith("Waiting") for s in watch.statuses), watch.statuses
    assert window.serving.serve_host is not None
    assert window.serving.batch is not None and window.serving.batch.engine.widest == 2  # one batch, both in it

    # Each is the reply it gets alone.
    finished = watch.window_finished()
    assert finished.reason in (FinishReason.MAX_TOKENS, FinishReason.EOS)
    (request,) = watch.requests
    tokens = watch.window_tokens
    assert tokens and window.transcript.messages[-1].content
    messages = [*request.history, {"role": "user", "content": WINDOW_TEXT}]
    check_greedy(demo_runtime, messages, tokens, request.params.sampler, WINDOW_TOKENS)
    user = [{"role": "user", "content": SERVED_QUESTION}]
    check_greedy(demo_runtime, user, served.tokens, SamplerParams(), SERVED_TOKENS)


@pytest.mark.slow
def test_stop_ends_only_the_window_reply_in_the_batch(qtbot, window: MainWindow, demo_runtime):
    window.controls.max_tokens.setValue(2000)  # with a long question, it runs until stopped
    watch, served = serve_one(qtbot, window)
    window.send(LONG_WINDOW_TEXT)
    wait_window_tokens(qtbot, window, watch, 3, [served])
    assert served.is_alive()
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT):
        window.page.stop_button.click()
    assert watch.window_finished().reason is FinishReason.CANCELLED
    assert len(watch.window_tokens) < 2000 and window.transcript.messages[-1].content
    qtbot.waitUntil(lambda: not served.is_alive(), timeout=REPLY_TIMEOUT)
    # The served request went on to its end, complete and the reply it gets alone.
    assert served.error is None and served.finish == "length" and len(served.tokens) == SERVED_TOKENS
    assert isinstance(watch.served[-1][1], Finished) and watch.served[-1][1].reason is FinishReason.MAX_TOKENS
    user = [{"role": "user", "content": SERVED_QUESTION}]
    check_greedy(demo_runtime, user, served.tokens, SamplerParams(), SERVED_TOKENS)


@pytest.mark.slow
def test_a_served_client_that_leaves_does_not_disturb_the_window_reply(qtbot, window: MainWindow, demo_runtime):
    window.controls.max_tokens.setValue(48)
    leave = threading.Event()
    watch, served = serve_one(qtbot, window, leave)
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT):
        window.send(WINDOW_TEXT)
        wait_window_tokens(qtbot, window, watch, 2, [served])
        leave.set()  # the client goes away while the window's reply decodes beside it
        qtbot.waitUntil(lambda: window.serving.panel.requests[0].done, timeout=REPLY_TIMEOUT)
    assert window.serving.panel.requests[0].status == "cancelled"
    finished = watch.window_finished()
    assert finished.reason in (FinishReason.MAX_TOKENS, FinishReason.EOS)
    (request,) = watch.requests
    messages = [*request.history, {"role": "user", "content": WINDOW_TEXT}]
    check_greedy(demo_runtime, messages, watch.window_tokens, request.params.sampler, 48)


@pytest.mark.slow
def test_the_panel_shows_every_running_request_live(qtbot, window: MainWindow):
    url = window.serving.start(0, parallel=2)
    streams = [ServedStream(url, SERVED_QUESTION), ServedStream(url, "Write a long essay about the history of rivers.")]
    for stream in streams:
        stream.start()
    panel = window.serving.panel
    shown: list[str] = []

    def both_shown() -> bool:
        live = [r for r in panel.requests if r.live and r.spans]
        text = panel.text.toPlainText()
        if len(live) == 2 and all("".join(p for _, p in r.spans) in text for r in live):
            shown.append(text)
            return True
        return False

    wait_streaming(qtbot, window, streams, both_shown)
    text = shown[0]
    assert "#1 127.0.0.1:" in text and "#2 127.0.0.1:" in text and text.count("running (ngram)") == 2
    for stream in streams:
        stream.join(timeout=REPLY_TIMEOUT / 1000)
        assert stream.error is None and stream.finish == "length"
    qtbot.waitUntil(lambda: all(r.done for r in panel.requests), timeout=REPLY_TIMEOUT)
    # Nothing runs now: the latest request's text alone, without the lines naming each.
    latest = panel.requests[-1]
    qtbot.waitUntil(lambda: panel.text.toPlainText() == "".join(p for _, p in latest.spans), timeout=REPLY_TIMEOUT)


def test_automatic_joins_the_batch_by_lookup_the_draft_model_as_itself_and_files_do_not(window: MainWindow) -> None:
    def request(drafter: str, attachments: tuple[Attachment, ...] = ()) -> ReplyRequest:
        return ReplyRequest(1, [], "Hi", GenerationParams(), drafter, attachments=attachments)

    window.serving.start(0, parallel=2)
    batch = window.serving.batch
    assert batch is not None and batch.draft_model is not None  # the demo pair's draft is shared by the batch
    for drafter in (DrafterKind.COMPOSITE, DrafterKind.DRAFT_MODEL, DrafterKind.NGRAM, DrafterKind.NONE):
        assert batch_refusal(request(drafter.value), batch) == "", drafter
    assert batch_drafter(DrafterKind.COMPOSITE.value) == DrafterKind.NGRAM.value
    assert batch_drafter(DrafterKind.DRAFT_MODEL.value) == DrafterKind.DRAFT_MODEL.value
    assert "mtp drafter does not join" in batch_refusal(request(DrafterKind.MTP.value), batch)
    note = Attachment("notes.md", 5, "notes", 2)
    assert "attached files" in batch_refusal(request(DrafterKind.COMPOSITE.value, (note,)), batch)


@pytest.mark.slow
def test_a_window_reply_with_the_draft_model_drafts_with_the_batchs_shared_draft(
    qtbot, window: MainWindow, demo_runtime
):
    drafters = window.controls.drafter
    drafters.setCurrentIndex(drafters.findData(DrafterKind.DRAFT_MODEL.value))
    window.controls.auto_depth.setChecked(False)
    window.controls.depth_slider.setValue(3)  # every round drafts, whatever the load says a row costs
    window.controls.max_tokens.setValue(32)
    watch, served = serve_one(qtbot, window)
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT):
        window.send(WINDOW_TEXT)
    assert watch.waited == [] and not any(s.startswith("Waiting") for s in watch.statuses)
    finished = watch.window_finished()
    assert finished.reason in (FinishReason.MAX_TOKENS, FinishReason.EOS)
    # It drafted in its slot of the batch's draft context, beside the served request, and the drafts were kept.
    drafted, kept = finished.stats.by_source.get("model", [0, 0])
    assert drafted > 0 and kept > 0
    assert window.serving.batch is not None and window.serving.batch.engine.widest == 2
    (request,) = watch.requests
    messages = [*request.history, {"role": "user", "content": WINDOW_TEXT}]
    check_greedy(demo_runtime, messages, watch.window_tokens, request.params.sampler, 32)
    served.join(timeout=REPLY_TIMEOUT / 1000)
    assert served.error is None and served.finish == "length"


@pytest.mark.slow
def test_a_reply_the_batch_cannot_run_waits_and_says_why(qtbot, window: MainWindow, tmp_path: Path):
    notes = tmp_path / "notes.md"
    notes.write_text("The lighthouse is painted red and white.\n")
    window.files.attach_paths([str(notes)])  # the batch drafts from no outside text
    leave = threading.Event()
    watch, served = serve_one(qtbot, window, leave)
    status = window.statusBar()
    window.send(WINDOW_TEXT)
    qtbot.waitUntil(lambda: status.currentMessage().startswith("Waiting for the served"), timeout=REPLY_TIMEOUT)
    assert watch.waited == [True] and "attached files does not join their batch" in status.currentMessage()
    assert "\n" not in status.currentMessage()
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT):
        leave.set()  # the served request ends; the reply gets the runtime and runs alone
    assert watch.waited == [True, False] and window.transcript.messages[-1].content


@pytest.mark.slow
def test_stopping_the_server_lets_the_window_reply_in_the_batch_end(qtbot, window: MainWindow, demo_runtime):
    window.controls.max_tokens.setValue(48)
    watch, served = serve_one(qtbot, window)
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT):
        window.send(WINDOW_TEXT)
        wait_window_tokens(qtbot, window, watch, 2, [served])
        window.serving.stop()  # returns with the reply still decoding: the batch's turn ends with it
        assert not window.serving.serving and window.serving.batch is None
    served.join(timeout=REPLY_TIMEOUT / 1000)
    assert served.finish != "length" and len(served.tokens) < SERVED_TOKENS  # cut off by the stop
    assert watch.window_finished().reason in (FinishReason.MAX_TOKENS, FinishReason.EOS)
    (request,) = watch.requests
    messages = [*request.history, {"role": "user", "content": WINDOW_TEXT}]
    check_greedy(demo_runtime, messages, watch.window_tokens, request.params.sampler, 48)
    # Served again, the next reply is as right (the old batch was closed on the runtime's thread).
    window.serving.start(0, parallel=2)
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT):
        window.send("Name two birds.")
    assert window.transcript.messages[-1].content


@pytest.mark.slow
def test_a_hybrid_target_serves_its_requests_in_a_batch(qtbot, settings, tmp_path: Path):
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    hybrid = Path(__file__).parents[1] / "models" / "lfm2.gguf"  # attention and recurrent layers
    with qtbot.waitSignal(window.models_loaded, timeout=LOAD_TIMEOUT):
        window.load_models(str(hybrid), "")
    try:
        url = window.serving.start(0, parallel=2)
        assert window.serving.note.text() == f"Serving on {url}, up to 2 requests at once"
        batch = window.serving.batch
        assert batch is not None and window.host.worker.shared is not None
        answer = httpx.post(
            f"{url}/completions", json={"model": "m", "prompt": "Hello", "max_tokens": 4}, timeout=REPLY_TIMEOUT / 1000
        )
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 4
        assert batch.engine.rounds > 0  # decoded in the batch, not one at a time
    finally:
        window.serving.stop()
        window.close()
        store.close()


@pytest.mark.slow
def test_a_target_that_cannot_batch_serves_one_request_at_a_time_and_says_so(
    qtbot, settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    hybrid = Path(__file__).parents[1] / "models" / "lfm2.gguf"
    with qtbot.waitSignal(window.models_loaded, timeout=LOAD_TIMEOUT):
        window.load_models(str(hybrid), "")
    try:
        # Bindings that cannot save one sequence's state cannot take a hybrid target's drafts back in a batch.
        with monkeypatch.context() as older:
            older.delattr(llama_cpp, "llama_state_seq_get_data")
            url = window.serving.start(0, parallel=2)
        note = window.serving.note
        assert note.text() == f"Serving on {url}, one request at a time (this target cannot batch them)"
        assert "hybrid" in note.toolTip() and "--parallel 1" in note.toolTip() and "\n" not in note.text()
        assert window.serving.batch is None and window.host.worker.shared is None
        answer = httpx.post(
            f"{url}/completions", json={"model": "m", "prompt": "Hello", "max_tokens": 4}, timeout=REPLY_TIMEOUT / 1000
        )
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] >= 1
    finally:
        window.serving.stop()
        window.close()
        store.close()


@pytest.mark.slow
def test_a_request_sent_while_a_window_reply_decodes_joins_it(qtbot, window: MainWindow, demo_runtime):
    window.controls.max_tokens.setValue(SERVED_TOKENS)
    url = window.serving.start(0, parallel=2)
    watch = Watch(window)
    window.send(LONG_WINDOW_TEXT)  # no served request runs: the reply drives the batch itself
    wait_window_tokens(qtbot, window, watch, 2)
    served = ServedStream(url, SERVED_QUESTION, max_tokens=WINDOW_TOKENS)
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT):
        served.start()
    served.join(timeout=REPLY_TIMEOUT / 1000)
    assert served.error is None and served.finish == "length" and len(served.tokens) == WINDOW_TOKENS
    # The request decoded inside the reply's run: it never waited for the reply to end.
    (_, started), (ended_at, ended) = watch.served
    assert isinstance(started, Started) and isinstance(ended, Finished)
    assert ended_at < watch.window_events[-1][0]
    assert window.serving.batch is not None and window.serving.batch.engine.widest == 2
    assert watch.waited == []
    (request,) = watch.requests
    messages = [*request.history, {"role": "user", "content": LONG_WINDOW_TEXT}]
    check_greedy(demo_runtime, messages, watch.window_tokens, request.params.sampler, SERVED_TOKENS)
    user = [{"role": "user", "content": SERVED_QUESTION}]
    check_greedy(demo_runtime, user, served.tokens, SamplerParams(), WINDOW_TOKENS)


@pytest.mark.slow
def test_stopping_the_server_while_the_window_reply_drives_the_batch(qtbot, window: MainWindow, demo_runtime):
    window.controls.max_tokens.setValue(48)
    window.serving.start(0, parallel=2)
    serve_host = window.serving.serve_host
    assert serve_host is not None
    watch = Watch(window)
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT):
        window.send(WINDOW_TEXT)  # nothing served: the reply's own turn drives the batch
        wait_window_tokens(qtbot, window, watch, 2)
        window.serving.stop()
    assert watch.window_finished().reason in (FinishReason.MAX_TOKENS, FinishReason.EOS)
    (request,) = watch.requests
    messages = [*request.history, {"role": "user", "content": WINDOW_TEXT}]
    check_greedy(demo_runtime, messages, watch.window_tokens, request.params.sampler, 48)
    # The server's thread that waited for requests ended with the batch's turn.
    qtbot.waitUntil(lambda: not serve_host._thread.is_alive(), timeout=REPLY_TIMEOUT)
