"""The window reads the composer's prompt ahead on the real demo pair: after a pause in typing both contexts hold
it and Send reads none of it; Send, an edit, another conversation and a load stop it; the setting turns it off."""

from __future__ import annotations

import threading

import pytest
from ui.test_real_models import LOAD_TIMEOUT, REPLY_TIMEOUT, open_window

from specchat.core.cancel import CancelToken
from specchat.core.runtime.read_ahead import READ_AHEAD_CHUNK
from specchat.core.types import Finished, FinishReason, common_prefix_len
from specchat.ui.main_window import MainWindow
from specchat.ui.prompt_read_ahead import READ_AHEAD_DELAY_MS
from specchat.ui.worker import ReadAheadDone

pytestmark = pytest.mark.slow

DOCUMENT = "\n".join(
    f"{i}. The ferry to the island leaves at {6 + i % 12} o'clock from pier {i % 5}." for i in range(45)
)
MESSAGE = "Proofread these notes and say which lines repeat a time:\n\n" + DOCUMENT


def answers(window: MainWindow) -> list[ReadAheadDone]:
    """Every read ahead's answer, in order (the worker's own signal: stale ones included)."""
    seen: list[ReadAheadDone] = []
    window.host.worker.read_ahead_done.connect(seen.append)
    return seen


def body_of(window: MainWindow) -> list[int]:
    """The prompt's tokens a reply to the composer's message would read before its first token."""
    runtime = window.host.worker.runtime
    assert runtime is not None
    return runtime.prompt(window.files.messages()).tokens[:-1]


def send(qtbot, window: MainWindow) -> Finished:
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT) as blocker:
        window.composer.send()
    finished = blocker.args[0]
    assert isinstance(finished, Finished)
    assert finished.reason in (FinishReason.MAX_TOKENS, FinishReason.EOS), finished.message
    assert window.transcript.messages[-1].content
    return finished


def test_typing_pauses_read_the_prompt_and_send_reads_none_of_it(qtbot, settings, store, demo_pair) -> None:
    window = open_window(qtbot, settings, store, demo_pair, max_tokens=8)
    seen = answers(window)
    window.composer.setPlainText(MESSAGE)
    qtbot.waitUntil(lambda: bool(seen) and seen[-1].read.finished, timeout=REPLY_TIMEOUT)
    body = body_of(window)
    runtime = window.host.worker.runtime
    assert runtime is not None and runtime.draft_context is not None
    # Both contexts hold the prompt (the runtime's thread is idle now: the read has answered).
    assert runtime.target_context.tokens == body and runtime.draft_context.tokens == body
    done = seen[-1].read
    assert done.draft and done.target_held == len(body) and done.draft_read > 0
    finished = send(qtbot, window)
    assert finished.stats.prompt_tokens == len(body) + 1
    assert finished.stats.reused_prompt_tokens == len(body)  # nothing of the prompt was left to read
    window.close()


def test_send_during_a_read_stops_it_and_the_reply_reads_the_rest(qtbot, settings, store, demo_pair) -> None:
    window = open_window(qtbot, settings, store, demo_pair, max_tokens=8)
    seen = answers(window)
    window.read_ahead.enabled = False  # the test starts the read itself, not the pause after typing
    window.composer.setPlainText(MESSAGE)
    body = body_of(window)
    window.read_ahead.enabled = True
    with qtbot.waitSignal(window.read_ahead.chunk_read, timeout=REPLY_TIMEOUT):
        window.read_ahead.start_now()
    finished = send(qtbot, window)
    (done,) = seen
    assert not done.read.finished and done.read.target_held < len(body)
    # The reply found what the read had got to, and read the rest itself.
    assert finished.stats.reused_prompt_tokens == done.read.target_held >= READ_AHEAD_CHUNK
    window.close()


def test_an_edit_during_a_read_restarts_it_from_the_common_prefix(qtbot, settings, store, demo_pair) -> None:
    window = open_window(qtbot, settings, store, demo_pair, max_tokens=8)
    seen = answers(window)
    window.read_ahead.enabled = False
    window.composer.setPlainText(MESSAGE)
    first = body_of(window)
    window.read_ahead.enabled = True
    with qtbot.waitSignal(window.read_ahead.chunk_read, timeout=REPLY_TIMEOUT):
        window.read_ahead.start_now()
    window.composer.setPlainText(MESSAGE.replace("Proofread these notes", "Check these notes"))  # stops it
    qtbot.waitUntil(lambda: len(seen) == 2, timeout=REPLY_TIMEOUT)  # read again after the pause
    stopped, again = seen
    edited = body_of(window)
    shared = common_prefix_len(first, edited)
    assert not stopped.read.finished and again.read.finished
    assert stopped.read.target_held > shared  # it had read past the edit
    assert again.read.target_reused == shared and again.read.target_held == len(edited)
    finished = send(qtbot, window)
    assert finished.stats.reused_prompt_tokens == len(edited)
    window.close()


def started(qtbot, window: MainWindow) -> int:
    """Start a read ahead now and wait for its first chunk; its serial."""
    with qtbot.waitSignal(window.read_ahead.chunk_read, timeout=REPLY_TIMEOUT):
        window.read_ahead.start_now()
    return window.read_ahead.serial


def answer(seen: list[ReadAheadDone], serial: int) -> ReadAheadDone | None:
    return next((done for done in seen if done.serial == serial), None)


def test_another_conversation_a_load_and_closing_stop_a_read(qtbot, settings, store, demo_pair) -> None:
    window = open_window(qtbot, settings, store, demo_pair, max_tokens=8)
    seen = answers(window)
    window.composer.setPlainText("Name a colour.")
    send(qtbot, window)  # a conversation to leave
    window.composer.setPlainText(MESSAGE)
    serial = started(qtbot, window)
    window.new_conversation()
    qtbot.waitUntil(lambda: answer(seen, serial) is not None, timeout=REPLY_TIMEOUT)
    assert not answer(seen, serial).read.finished  # type: ignore[union-attr]

    serial = started(qtbot, window)  # the new conversation's prompt: the same message, no history
    with qtbot.waitSignal(window.models_loaded, timeout=LOAD_TIMEOUT):
        window.load_models(demo_pair.target, demo_pair.draft)
        qtbot.waitUntil(lambda: answer(seen, serial) is not None, timeout=REPLY_TIMEOUT)
    assert not answer(seen, serial).read.finished  # type: ignore[union-attr]  # stopped before the load began

    serial = started(qtbot, window)
    window.close()  # joins the runtime's thread: the read stops at its next chunk
    assert not window.host.runtime_thread.isRunning()
    last = answer(seen, serial)
    assert last is None or not last.read.finished


def test_the_setting_off_reads_nothing(qtbot, settings, store, demo_pair) -> None:
    window = open_window(qtbot, settings, store, demo_pair, max_tokens=8)
    seen = answers(window)
    assert window.controls.read_ahead.isChecked()  # on by default
    window.controls.read_ahead.setChecked(False)
    window.composer.setPlainText(MESSAGE)
    qtbot.wait(READ_AHEAD_DELAY_MS * 3)
    window.read_ahead.start_now()  # as the pause would: nothing is asked of the runtime
    finished = send(qtbot, window)
    assert seen == [] and window.read_ahead.serial == 0
    assert finished.stats.reused_prompt_tokens < finished.stats.prompt_tokens - 1 - READ_AHEAD_CHUNK
    window.save_settings()
    assert settings.read_ahead is False
    window.close()


def test_a_served_request_stops_a_read(qtbot, settings, store, demo_pair) -> None:
    window = open_window(qtbot, settings, store, demo_pair, max_tokens=8)
    seen = answers(window)
    window.composer.setPlainText(MESSAGE)
    serial = started(qtbot, window)
    ran: list[bool] = []
    served = threading.Thread(target=lambda: ran.append(window.host.worker.call(lambda: None, CancelToken())))
    served.start()  # as the window's server hands a request to the runtime's thread
    qtbot.waitUntil(lambda: not served.is_alive(), timeout=REPLY_TIMEOUT)
    assert ran == [True]
    qtbot.waitUntil(lambda: answer(seen, serial) is not None, timeout=REPLY_TIMEOUT)
    assert not answer(seen, serial).read.finished  # type: ignore[union-attr]
    window.close()
