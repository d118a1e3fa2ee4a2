"""The chat controller's logic without Qt: a real store, a recording host, real engine events."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specchat.core.cancel import CancelToken
from specchat.core.chat.controller import ChatListener, ChatLogic, ReplyRequest, ReplySettings
from specchat.core.chat.store import ConversationStore
from specchat.core.engine.depth import DepthControl
from specchat.core.types import DrafterKind, Finished, FinishReason, GenerationParams, GenerationStats
from support.events import drafted, verified


class Recorder(ChatListener):
    """Every call the logic makes, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[object, ...]]] = []

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def args(self, name: str) -> list[tuple[object, ...]]:
        return [args for n, args in self.calls if n == name]

    def transcript_replaced(self) -> None:
        self.calls.append(("transcript_replaced", ()))

    def message_appended(self) -> None:
        self.calls.append(("message_appended", ()))

    def events_folded(self, batch: list[object]) -> None:
        self.calls.append(("events_folded", (batch,)))

    def reply_started(self) -> None:
        self.calls.append(("reply_started", ()))

    def reply_finished(self, finished: Finished) -> None:
        self.calls.append(("reply_finished", (finished,)))

    def conversations_changed(self) -> None:
        self.calls.append(("conversations_changed", ()))

    def notice(self, text: str) -> None:
        self.calls.append(("notice", (text,)))

    def status(self, text: str) -> None:
        self.calls.append(("status", (text,)))

    def composer_text(self, text: str, replace: bool) -> None:
        self.calls.append(("composer_text", (text, replace)))


class Submitter:
    """Keeps every reply request instead of generating."""

    def __init__(self) -> None:
        self.requests: list[ReplyRequest] = []

    def generate(self, request: ReplyRequest) -> CancelToken:
        self.requests.append(request)
        return CancelToken()


Chat = tuple[ChatLogic, ConversationStore, Submitter, Recorder]


@pytest.fixture
def chat(tmp_path: Path) -> Chat:
    store = ConversationStore(tmp_path / "chats.sqlite3")
    host, listener = Submitter(), Recorder()
    settings = ReplySettings(GenerationParams(max_tokens=64), DrafterKind.DRAFT_MODEL.value)
    logic = ChatLogic(store, host, lambda: settings, DepthControl(), listener)
    return logic, store, host, listener


def reply(logic: ChatLogic, words: tuple[str, ...], last: str) -> Finished:
    """One speculative round that accepts ``words`` and corrects with ``last``, then the end of the reply."""
    n = len(words)
    finished = Finished(FinishReason.EOS, GenerationStats(rounds=1, drafted=n, accepted=n, generated=n + 1))
    logic.on_events([drafted(0, words), verified(0, words, (), last), finished])
    return finished


def test_sending_stores_the_message_and_asks_for_a_reply_with_the_history(chat: Chat) -> None:
    logic, store, host, listener = chat
    assert logic.send("  Hello there  ")
    assert logic.conversation_id is not None and logic.streaming
    stored = store.messages(logic.conversation_id)
    assert [(m.role, m.content) for m in stored] == [("user", "Hello there")]
    assert store.conversation(logic.conversation_id).title == "Hello there"
    (request,) = host.requests
    assert request.conversation_id == logic.conversation_id
    assert (request.history, request.user_text, request.params.max_tokens) == ([], "Hello there", 64)
    assert listener.names() == ["conversations_changed", "message_appended", "message_appended", "reply_started"]
    assert not logic.send("again")  # one reply at a time

    reply(logic, ("Hi", "!"), " Bye")
    logic.send("Second")
    assert host.requests[-1].history == [
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": "Hi! Bye"},
    ]
    assert host.requests[-1].user_text == "Second"


def test_a_finished_reply_is_stored_with_its_figures(chat: Chat) -> None:
    logic, store, _, listener = chat
    logic.send("Count")
    finished = reply(logic, ("one", " two"), " three")
    assert not logic.streaming
    assert logic.conversation_id is not None
    user, answer = store.messages(logic.conversation_id)
    assert (answer.role, answer.content, answer.finish_reason) == ("assistant", "one two three", "eos")
    assert answer.stats is not None and (answer.stats["accepted"], answer.stats["drafted"]) == (2, 2)
    assert [s.text for s in answer.spans] == ["one", " two", " three"]
    assert logic.transcript.messages[-1].id == answer.id  # the screen knows the stored row
    assert listener.args("reply_finished") == [(finished,)]
    assert len(listener.args("events_folded")) == 1


def test_regenerating_stores_a_new_version_of_the_reply(chat: Chat) -> None:
    logic, store, host, _ = chat
    logic.send("Name a colour")
    reply(logic, ("red",), ".")
    assert logic.can_regenerate()
    logic.regenerate()
    assert (host.requests[-1].history, host.requests[-1].user_text) == ([], "Name a colour")
    assert [m.role for m in logic.transcript.messages] == ["user", "assistant"]  # the new reply, streaming
    reply(logic, ("blue",), "!")
    assert logic.conversation_id is not None
    answer = store.messages(logic.conversation_id)[-1]
    assert (answer.content, answer.version, answer.versions) == ("blue!", 2, 2)
    assert logic.switch_version(1, -1)
    assert logic.transcript.messages[-1].content == "red."


def test_editing_a_message_branches_the_conversation(chat: Chat) -> None:
    logic, store, host, listener = chat
    logic.send("First question")
    reply(logic, ("A",), ".")
    logic.edit_message(0)
    assert logic.editing and logic.transcript.messages == []
    assert listener.args("composer_text")[-1] == ("First question", True)
    assert logic.send("Better question")
    assert (host.requests[-1].history, host.requests[-1].user_text) == ([], "Better question")
    reply(logic, ("B",), "!")
    assert logic.conversation_id is not None
    user, answer = store.messages(logic.conversation_id)
    assert (user.content, user.version, user.versions) == ("Better question", 2, 2)
    assert answer.content == "B!"
    assert logic.switch_version(0, -1)  # the first branch is still there
    assert [m.content for m in logic.transcript.messages] == ["First question", "A."]


def test_an_error_is_one_notice_and_the_message_goes_back_to_the_composer(chat: Chat) -> None:
    logic, store, _, listener = chat
    logic.send("Will fail")
    logic.on_events([Finished(FinishReason.ERROR, GenerationStats(), "the model broke")])
    assert listener.args("notice") == [("the model broke",)]
    assert listener.args("composer_text") == [("Will fail", False)]
    assert logic.conversation_id is not None and store.messages(logic.conversation_id) == []
    assert not logic.streaming


def test_switching_conversations_reloads_the_transcript(chat: Chat) -> None:
    logic, store, _, listener = chat
    logic.send("In the first")
    reply(logic, ("one",), ".")
    first = logic.conversation_id
    logic.new_conversation()
    logic.send("In the second")
    reply(logic, ("two",), ".")
    second = logic.conversation_id
    assert first is not None and second is not None and first != second
    assert {c.id for c in store.conversations()} == {first, second}
    replaced = len(listener.args("transcript_replaced"))
    logic.open_conversation(first)
    assert [m.content for m in logic.transcript.messages] == ["In the first", "one."]
    assert logic.transcript.messages[-1].figures is not None  # the stored figures come back too
    assert len(listener.args("transcript_replaced")) == replaced + 1
    logic.open_conversation(second)
    assert [m.content for m in logic.transcript.messages] == ["In the second", "two."]


def test_the_logic_imports_no_qt() -> None:
    code = "import sys, specchat.core.chat.controller; print(sorted(m for m in sys.modules if 'PySide6' in m))"
    root = Path(__file__).resolve().parents[2]  # this checkout's package, not an installed one
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "[]"


def test_a_reply_that_waited_for_the_runtime_counts_its_first_token_from_decoding(chat: Chat, monkeypatch) -> None:
    import specchat.core.chat.transcript as transcript_module

    logic, store, _host, _listener = chat
    clock = [50.0]
    monkeypatch.setattr(f"{transcript_module.__name__}.time.monotonic", lambda: clock[0])
    logic.reply_waiting(False)  # no reply: nothing to tell
    logic.send("Hello")
    figures = logic.transcript.messages[-1].figures
    assert figures is not None
    figures.started = clock[0]
    logic.reply_waiting(True)  # a served request holds the runtime
    clock[0] += 9.0
    logic.reply_waiting(False)  # the reply decodes now
    clock[0] += 0.5
    logic.on_events([verified(0, ("Hi",), (), "!")])
    assert figures.waited_seconds == pytest.approx(9.0) and figures.first_token_seconds == pytest.approx(0.5)
    clock[0] += 5.0
    logic.reply_waiting(False)  # told again once decoding has begun: nothing changes
    assert figures.waited_seconds == pytest.approx(9.0)
    cut = GenerationStats(rounds=1, drafted=1, accepted=1, generated=2, generate_seconds=0.1)
    logic.on_events([Finished(FinishReason.MAX_TOKENS, cut)])
    assert logic.conversation_id is not None
    stats = store.messages(logic.conversation_id)[-1].stats
    assert stats is not None and stats["waited_seconds"] == pytest.approx(9.0)
    assert stats["first_token_seconds"] == pytest.approx(0.5)
    # its continuation waits too: counted apart, the first part's figures kept
    assert logic.continue_reply()
    logic.reply_waiting(True)
    clock[0] += 3.0
    logic.reply_waiting(False)
    clock[0] += 0.2
    logic.on_events([verified(0, (" more",), (), ".")])
    assert figures.resumed_waited_seconds == pytest.approx(3.0)
    assert figures.resumed_first_token_seconds == pytest.approx(0.2)
    assert figures.waited_seconds == pytest.approx(9.0) and figures.first_token_seconds == pytest.approx(0.5)
