"""Switching back to a conversation in the window does not read it again: the runtime kept its state."""

from __future__ import annotations

import pytest

from specchat.ui.main_window import MainWindow

pytestmark = pytest.mark.slow


def test_a_conversation_switched_back_to_finds_its_prompt_kept(qtbot, settings, store, demo_pair) -> None:
    settings.max_tokens, settings.depth, settings.temperature = 8, 4, 0.0
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.models_loaded, timeout=120_000):
        window.load_models(demo_pair.target, demo_pair.draft)
    with qtbot.waitSignal(window.reply_finished, timeout=300_000) as first:
        window.send("Summarise in one line: " + "The river rose in spring and the mill turned all summer. " * 8)
    essay = window.conversation_id
    window.chat.new_conversation()
    with qtbot.waitSignal(window.reply_finished, timeout=300_000) as other:
        window.send("Name three colours.")
    window.chat.open_conversation(essay)
    with qtbot.waitSignal(window.reply_finished, timeout=300_000) as again:
        window.send("Shorter, please.")
    read_first = first.args[0].stats.prompt_tokens
    # The other conversation shared only the template's opening; back here, all of the first turn is kept.
    assert other.args[0].stats.reused_prompt_tokens < read_first // 4
    assert again.args[0].stats.reused_prompt_tokens >= read_first
    assert [m.role for m in store.messages(essay)] == ["user", "assistant"] * 2
