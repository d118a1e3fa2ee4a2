"""The window's parts, driven through the real widgets on a fake runtime host and real SQLite files:
one path from the depth slider to the runtime, sampler presets per conversation, search snippets with the
matched words marked, and Continue only on the last reply cut at the limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QInputDialog

from specchat.core.chat.presets import BUILT_IN, CUSTOM
from specchat.core.chat.store import ConversationStore
from specchat.core.engine.depth import DepthControl
from specchat.core.settings import Settings
from specchat.core.types import Finished, FinishReason, GenerationStats
from specchat.ui.main_window import MainWindow
from specchat.ui.sidebar import SNIPPET_ROLE
from support.contrast import drawn_contrast
from support.events import verified
from support.fake_host import FakeHost, window_with
from support.stored import poke


def test_moving_the_slider_reaches_the_engines_depth_exactly_once(
    qtbot, settings, store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sets: list[int | None] = []
    real_set = DepthControl.set

    def recorded(self: DepthControl, depth: int | None) -> None:
        sets.append(depth)
        real_set(self, depth)

    monkeypatch.setattr(DepthControl, "set", recorded)
    settings.depth = 4
    window, host = window_with(qtbot, settings, store)
    assert sets == [] and window.depth_control.requested == 4  # made from the panel, not set after
    window.controls.depth_slider.setValue(7)
    assert sets == [7] and window.depth_control.requested == 7
    window.send("hello")
    window.controls.depth_slider.setValue(2)  # mid-reply: the runtime reads it at its next round
    request = host.requests[-1]
    assert request.depth is window.depth_control and request.depth.requested == 2
    assert sets == [7, 2]  # starting the reply set nothing again
    window.controls.auto_depth.setChecked(True)
    assert sets == [7, 2, None] and request.depth.requested is None


def _window(qtbot, path: Path, settings: Settings | None = None) -> tuple[MainWindow, FakeHost]:
    host = FakeHost()
    window = MainWindow(settings or Settings(), ConversationStore(path), host=host.as_host())
    qtbot.addWidget(window)
    host.loaded()
    return window, host


def _answer(qtbot, window: MainWindow, host: FakeHost, reason: FinishReason = FinishReason.EOS) -> None:
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([verified(0, ("Hel",), (), "lo"), Finished(reason, GenerationStats(generated=2))])
    window.chat_view.flush()


def test_presets_apply_save_and_come_back_with_each_conversation(qtbot, tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    window, host = _window(qtbot, path)
    bar, controls = window.panel.presets, window.controls
    assert bar.combo.currentText() == "Precise"  # the defaults are the greedy preset
    window.send("first")
    _answer(qtbot, window, host)
    first = window.conversation_id
    assert first is not None
    bar.combo.setFocus()
    qtbot.keyClick(bar.combo, Qt.Key.Key_Down)  # Balanced
    assert bar.combo.currentText() == "Balanced"
    assert (controls.temperature.value(), controls.top_p.value()) == (0.7, 0.9)
    window.send("second")
    assert host.requests[-1].params.sampler.temperature == 0.7  # the reply uses it
    _answer(qtbot, window, host)

    window.new_conversation()
    assert controls.temperature.value() == 0.7  # a new conversation starts from what is set
    qtbot.keyClick(bar.combo, Qt.Key.Key_Down)  # Creative
    controls.temperature.setValue(1.3)  # edited by hand: no preset's values
    assert bar.combo.currentText() == CUSTOM
    save = window.presets.save_current()
    assert isinstance(save, QInputDialog)
    save.setTextValue("Warm")
    save.accept()
    assert bar.combo.currentText() == "Warm" and "Warm" in window.settings.presets
    window.send("third")
    _answer(qtbot, window, host)
    second = window.conversation_id

    window.chat.open_conversation(first)  # switching back restores the first one's sampler
    assert bar.combo.currentText() == "Balanced" and controls.temperature.value() == 0.7
    window.chat.open_conversation(second)
    assert bar.combo.currentText() == "Warm" and controls.temperature.value() == 1.3
    window.save_settings()
    window.close()

    # After a restart, from the file: the last conversation reopens with its own sampler.
    settings = Settings(last_conversation=first, presets=window.settings.presets, temperature=1.3)
    again, _ = _window(qtbot, path, settings)
    assert again.conversation_id == first and again.panel.presets.combo.currentText() == "Balanced"
    assert again.controls.temperature.value() == 0.7
    assert [again.panel.presets.combo.itemText(i) for i in range(again.panel.presets.combo.count())] == [
        *(p.name for p in BUILT_IN),
        "Warm",
        CUSTOM,
    ]
    again.close()


def test_a_bad_stored_sampler_leaves_the_controls_as_they_are(qtbot, tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    store = ConversationStore(path)
    cid = store.create_conversation("poisoned")
    store.add_message(cid, "user", "hi")
    store.close()
    poke(path, "UPDATE conversations SET sampler = ? WHERE id = ?", '{"name": "x", "temperature": "hot"}', cid)
    window, _ = _window(qtbot, path, Settings(last_conversation=cid, temperature=0.4))
    assert window.conversation_id == cid and window.controls.temperature.value() == 0.4
    assert window.panel.presets.combo.currentText() == CUSTOM
    window.close()


def _yellow_pixels(window: MainWindow) -> int:
    image = window.sidebar.list.viewport().grab().toImage()
    count = 0
    for y in range(0, image.height(), 2):
        for x in range(0, image.width(), 2):
            c = QColor(image.pixel(x, y))
            count += c.red() > 200 and c.green() > 150 and c.blue() < 150
    return count


def test_the_search_shows_the_matched_words_highlighted_under_each_title(qtbot, settings, store) -> None:
    settings.theme = "light"
    for title, text in [("Sorting", "how to sort a list in python quickly"), ("Bread", "a sourdough starter")]:
        store.add_message(store.create_conversation(title), "user", text)
    window, _ = window_with(qtbot, settings, store)
    window.refresh_conversations()
    window.resize(900, 600)
    window.show()
    qtbot.waitExposed(window)
    items = [window.sidebar.list.item(i) for i in range(window.sidebar.list.count())]
    plain_height = window.sidebar.list.visualItemRect(items[0]).height()
    assert _yellow_pixels(window) == 0
    qtbot.keyClicks(window.sidebar.search_field, "python")
    shown = [item for item in items if not item.isHidden()]
    assert [item.text() for item in shown] == ["Sorting"]
    snippet = shown[0].data(SNIPPET_ROLE)
    assert "<b style='background-color: rgba(255, 200, 0, 110)'>python</b>" in snippet
    assert shown[0].toolTip() == "how to sort a list in python quickly"  # the tooltip without marks
    assert window.sidebar.list.visualItemRect(shown[0]).height() > plain_height  # the snippet's line under it
    qtbot.waitUntil(lambda: _yellow_pixels(window) > 0)  # drawn, marked
    window.sidebar.search_field.clear()
    assert all(item.data(SNIPPET_ROLE) is None for item in items)
    qtbot.waitUntil(lambda: _yellow_pixels(window) == 0)


def test_only_the_last_reply_cut_at_the_limit_offers_continue(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    for verdicts in (False, True):
        window.look.set_show_verdicts(verdicts)
        window.send("Tell me a story")
        _answer(qtbot, window, host, FinishReason.MAX_TOKENS)
        assert window.chat_view.toPlainText().count("Continue") == 1
        window.send("And another")  # the cut reply above is no longer the last: its link goes, its note stays
        assert window.chat_view.toPlainText().count("Continue") == 0
        assert window.chat_view.toPlainText().count("token limit") == 1 + 2 * verdicts
        _answer(qtbot, window, host, FinishReason.MAX_TOKENS)
        text = window.chat_view.toPlainText()
        assert text.count("Continue") == 1 and text.rsplit("\n", 1)[0].endswith("Continue")  # then its figures
        window.chat_view.redraw()  # the same as a full redraw draws it
        assert window.chat_view.toPlainText() == text


def test_the_system_prompt_line_reads_in_light_and_dark(qtbot, settings, store) -> None:
    window, _ = window_with(qtbot, settings, store)
    window.show()
    qtbot.waitExposed(window)
    window.chat.set_system_prompt("You are a concise assistant.")
    chip = window.page.system_prompt_chip
    chip.show_prompt(window.chat.transcript.system_prompt)
    try:
        for theme in ("light", "dark", "light"):
            window.look.set_theme(theme)
            qtbot.wait(10)
            background, best = drawn_contrast(chip)
            assert (background.lightness() < 100) == (theme == "dark"), (theme, background.name())
            assert best >= 7, (theme, best)  # dark grey text on the dark theme was about 2:1
    finally:
        window.look.set_theme("system")
