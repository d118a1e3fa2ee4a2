"""When the window asks for the composer's prompt to be read ahead (on a fake host: what it asks, not the models):
after a pause in typing, with the messages Send would build; every change stops the read; nothing while a reply
streams, before a pair is loaded, or with the setting off; the hint once a read is done."""

from __future__ import annotations

from specchat.core.chat.attachments import Attachment
from specchat.core.runtime.read_ahead import ReadAhead
from specchat.core.types import Finished, FinishReason, GenerationStats
from specchat.ui.prompt_read_ahead import HINT
from specchat.ui.worker import ReadAheadDone
from support.events import verified
from support.fake_host import window_with

PAUSE_MS = 2000  # the longest a test waits for the pause after typing to end


def test_a_pause_in_typing_asks_for_the_prompt_send_would_build(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    window.composer.setPlainText("Summarise the ")
    window.composer.setPlainText("Summarise the notes.  ")
    qtbot.waitUntil(lambda: len(host.read_aheads) == 1, timeout=PAUSE_MS)
    (request,) = host.read_aheads
    assert request.messages == window.files.messages()  # what the meter counts and Send sends
    assert request.messages[-1] == {"role": "user", "content": "Summarise the notes."}
    assert request.drafter == window.controls.drafter_kind
    token = host.read_ahead_tokens[-1]
    window.files.set_all([Attachment("notes.txt", 13, "Ferry at six.")])  # a file attached: read again
    assert token.cancelled  # stopped at once, not after the pause
    qtbot.waitUntil(lambda: len(host.read_aheads) == 2, timeout=PAUSE_MS)
    assert "Ferry at six." in host.read_aheads[-1].messages[-1]["content"]

    done = ReadAheadDone(window.read_ahead.serial, ReadAhead(40, 0, 40, 0, 40, True, True))
    window.statusBar().showMessage("Measuring plain decoding…")
    host.worker.read_ahead_done.emit(done)
    assert window.statusBar().currentMessage() == "Measuring plain decoding…"  # the hint never covers a message
    window.statusBar().clearMessage()
    host.worker.read_ahead_done.emit(ReadAheadDone(window.read_ahead.serial - 1, done.read))
    assert window.statusBar().currentMessage() == ""  # a stale answer says nothing
    host.worker.read_ahead_done.emit(done)
    assert window.statusBar().currentMessage() == HINT
    assert window.read_ahead.last is not None and window.read_ahead.last.read.finished


def test_send_stops_it_and_nothing_is_read_while_the_reply_streams(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    window.composer.setPlainText("Name a colour.")
    qtbot.waitUntil(lambda: len(host.read_aheads) == 1, timeout=PAUSE_MS)
    token = host.read_ahead_tokens[-1]
    window.send(window.composer.toPlainText())
    assert token.cancelled and window.streaming
    window.composer.setPlainText("typed while it streams")
    window.read_ahead.start_now()  # as the pause would: the runtime is busy
    assert len(host.read_aheads) == 1
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([verified(0, ("Red",), (), "."), Finished(FinishReason.EOS, GenerationStats())])
    qtbot.waitUntil(lambda: len(host.read_aheads) == 2, timeout=PAUSE_MS)  # free again: what was typed is read
    assert host.read_aheads[-1].messages[-1]["content"] == "typed while it streams"
    assert [m["role"] for m in host.read_aheads[-1].messages] == ["user", "assistant", "user"]


def test_another_conversation_stops_it_and_reads_that_ones_prompt(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    window.composer.setPlainText("Name a colour.")
    window.send(window.composer.toPlainText())
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([verified(0, ("Red",), (), "."), Finished(FinishReason.EOS, GenerationStats())])
    window.composer.setPlainText("And another?")
    qtbot.waitUntil(lambda: len(host.read_aheads) == 1, timeout=PAUSE_MS)
    token = host.read_ahead_tokens[-1]
    window.new_conversation()
    assert token.cancelled
    qtbot.waitUntil(lambda: len(host.read_aheads) == 2, timeout=PAUSE_MS)
    assert host.read_aheads[-1].messages == [{"role": "user", "content": "And another?"}]


def test_nothing_is_read_before_a_pair_loads_nor_with_the_setting_off(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store, loaded=False)
    window.composer.setPlainText("Name a colour.")
    window.read_ahead.start_now()
    assert host.read_aheads == []
    host.loaded()
    qtbot.waitUntil(lambda: len(host.read_aheads) == 1, timeout=PAUSE_MS)  # read once the pair is there
    token = host.read_ahead_tokens[-1]
    window.controls.read_ahead.setChecked(False)
    assert token.cancelled
    window.composer.setPlainText("Name two colours.")
    window.read_ahead.start_now()
    qtbot.wait(500)
    assert len(host.read_aheads) == 1
    window.controls.read_ahead.setChecked(True)
    qtbot.waitUntil(lambda: len(host.read_aheads) == 2, timeout=PAUSE_MS)
