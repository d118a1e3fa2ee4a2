"""The window's comfort and truthfulness, driven through a fake engine host (no model needed)."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtGui import QAction, QKeySequence, QPalette
from PySide6.QtWidgets import QAbstractSpinBox, QLabel, QMessageBox, QWidget

from specchat.core.chat.baseline import Baseline
from specchat.core.chat.store import ConversationStore, ReplyWriter
from specchat.core.settings import load_settings
from specchat.core.types import Finished, FinishReason, GenerationStats
from specchat.ui.worker import ModelInfo
from support.events import drafted, verified
from support.fake_host import two_versions, window_with


def stored_conversation(store: ConversationStore, title: str, reply: str = "Hello") -> int:
    cid = store.create_conversation(title)
    store.add_message(cid, "user", "hi")
    writer = ReplyWriter(store, cid)
    writer.feed(verified(0, (reply[:-1],), (), reply[-1]))
    writer.feed(Finished(FinishReason.EOS, GenerationStats(rounds=1, drafted=1, accepted=1, generated=2)))
    return cid


def test_dark_and_light_themes_change_the_window(qtbot, settings, store) -> None:
    window, _ = window_with(qtbot, settings, store)
    try:
        window.look.set_theme("dark")
        qtbot.waitUntil(lambda: window.palette().color(QPalette.ColorRole.Base).lightness() < 128)
        dark = window.palette().color(QPalette.ColorRole.Base)
        assert dark.lightness() < 80 and window.chat_view.palette().color(QPalette.ColorRole.Text).lightness() > 180
        window.look.set_theme("light")
        qtbot.waitUntil(lambda: window.palette().color(QPalette.ColorRole.Base).lightness() > 128)
        light = window.palette().color(QPalette.ColorRole.Base)
        assert light.lightness() > 230 and light != dark
    finally:
        window.look.set_theme("system")
    window.close()
    assert load_settings().theme == "system"


def test_zoom_changes_the_text_size_and_is_remembered(qtbot, settings, store) -> None:
    window, _ = window_with(qtbot, settings, store)
    base = window.chat_view.font().pointSizeF()
    zoom_in = next(a for a in window.findChildren(QAction) if a.text() == "Zoom &in")
    assert zoom_in.shortcut().matches(QKeySequence("Ctrl++")) == QKeySequence.SequenceMatch.ExactMatch
    zoom_in.trigger()
    zoom_in.trigger()
    assert window.chat_view.font().pointSizeF() == base + 2 and window.composer.font().pointSizeF() == base + 2
    window.close()
    assert load_settings().zoom == 2
    again, _ = window_with(qtbot, load_settings(), store)
    assert again.chat_view.font().pointSizeF() == base + 2
    again.look.set_zoom(0)
    assert again.chat_view.font().pointSizeF() == base


def test_side_panels_collapse_and_stay_collapsed(qtbot, settings, store) -> None:
    window, _ = window_with(qtbot, settings, store)
    window.show()
    window.look.sidebar_action.trigger()
    window.look.panel_action.trigger()
    assert not window.sidebar.isVisible() and not window.panel.isVisible()
    window.close()
    again, _ = window_with(qtbot, load_settings(), store)
    again.show()
    assert not again.sidebar.isVisible() and not again.panel.isVisible()
    again.look.set_sidebar_visible(True)
    assert again.sidebar.isVisible() and again.look.sidebar_action.isChecked()


def _clipped(root: QWidget) -> list[str]:
    """Visible labels and controls narrower or shorter than they need to show their content."""
    out = []
    for child in root.findChildren(QWidget):
        if not child.isVisible() or child.minimumSizeHint().isEmpty():
            continue
        parent = child.parentWidget()
        if isinstance(parent, QAbstractSpinBox) or type(parent).__name__.startswith("QLabeled"):
            continue  # the parts of a composite control, sized by it (the same at any window size)
        need = child.minimumSizeHint()
        if isinstance(child, QLabel) and child.wordWrap():
            need.setWidth(min(need.width(), 40))  # wrapping labels only need room for a word
        if child.width() < need.width() or child.height() < need.height():
            name = child.objectName() or child.text() if isinstance(child, QLabel) else ""
            size = f"{child.width()}x{child.height()} < {need.width()}x{need.height()}"
            out.append(f"{type(child).__name__} {name} {size}")
    return out


def test_usable_at_900_by_600(qtbot, settings, store) -> None:
    window, _ = window_with(qtbot, settings, store)
    window.send("hi")  # the chat page, with a reply under way
    window.resize(900, 600)
    window.show()
    qtbot.waitExposed(window)
    qtbot.wait(50)
    assert window.width() <= 900 and window.height() <= 600
    assert window.chat_view.width() >= 400, window.chat_view.width()
    inside = window.panel.widget()
    assert inside is not None
    assert _clipped(inside) == []
    # The panel scrolls instead of squeezing: its content is never wider than the visible part.
    assert inside.width() <= window.panel.viewport().width()
    assert window.stats.chart_view.height() >= window.stats.chart_view.minimumHeight()


def test_restart_reopens_the_last_conversation_without_a_model(qtbot, settings, store) -> None:
    stored_conversation(store, "Older")
    cid = stored_conversation(store, "Last one", "Bye")
    stored_conversation(store, "Newest")
    settings.last_conversation = cid
    window, _ = window_with(qtbot, settings, store, loaded=False)
    assert window.conversation_id == cid
    assert window.stack.currentIndex() == 1  # the chat, not the welcome page
    assert [m.content for m in window.transcript.messages] == ["hi", "Bye"]
    assert window.sidebar.current_id() == cid


def test_a_message_before_any_load_loads_the_last_pair_then_sends(qtbot, settings, store, tmp_path: Path) -> None:
    target = tmp_path / "t.gguf"
    target.write_bytes(b"GGUF")
    settings.last_target, settings.last_draft = str(target), ""
    window, host = window_with(qtbot, settings, store, loaded=False)
    assert window.composer.isEnabled() and window.page.send_button.isEnabled()
    window.composer.setPlainText("hello there")
    window.composer.send()
    assert host.loads == [(str(target), "")] and host.requests == []
    host.loaded()
    assert [r.user_text for r in host.requests] == ["hello there"]
    assert window.streaming


def test_switching_conversations_mid_reply_keeps_it_streaming_into_its_own(qtbot, settings, store) -> None:
    other = stored_conversation(store, "Other", "Yes")
    window, host = window_with(qtbot, settings, store)
    window.send("first")
    streaming = window.conversation_id
    host.worker.events.emit([verified(0, ("Hel",), (), "lo")])
    window.chat.open_conversation(other)  # the click is not lost
    assert window.conversation_id == other and [m.content for m in window.transcript.messages] == ["hi", "Yes"]
    assert not window.page.stop_button.isEnabled() and not window.page.send_button.isEnabled()
    host.worker.events.emit([drafted(1, (" wor",)), verified(1, (" wor",), (), "ld")])
    window.chat_view.flush()
    assert "world" not in window.chat_view.toPlainText()
    window.chat.open_conversation(streaming)
    assert window.transcript.messages[-1].content == "Hello world" and window.page.stop_button.isEnabled()
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([Finished(FinishReason.EOS, GenerationStats(rounds=2, generated=4))])
    assert [m.content for m in store.messages(streaming)] == ["first", "Hello world"]
    assert [m.content for m in store.messages(other)] == ["hi", "Yes"]


def test_delete_asks_first(qtbot, settings, store) -> None:
    cid = stored_conversation(store, "Keep me?")
    window, _ = window_with(qtbot, settings, store)
    box = window.dialogs.confirm_delete(cid)
    assert "Keep me?" in box.text()
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert [c.id for c in store.conversations()] == [cid]
    box = window.dialogs.confirm_delete(cid)
    box.button(QMessageBox.StandardButton.Yes).click()
    assert store.conversations() == [] and window.sidebar.list.count() == 0


def test_controls_tell_the_truth(qtbot, settings, store) -> None:
    settings.depth = None  # auto
    window, host = window_with(qtbot, settings, store)
    assert not window.page.regenerate_button.isEnabled()  # nothing to regenerate in an empty conversation
    assert not window.stats.measure_button.isEnabled()  # the calibration after loading is running
    host.worker.baseline_measured.emit(Baseline(host.calibrations[-1], 40.0, 48, time.time()))
    assert window.stats.measure_button.isEnabled()
    window.send("count")
    assert not window.stats.measure_button.isEnabled()  # not while a reply runs
    assert window.progress.isVisible() or window.progress.maximum() == 0  # working until the first token
    host.worker.events.emit([drafted(0, tuple("abcdefghijklmn")), verified(0, tuple("abcdefghijklmn"), (), "o")])
    assert window.controls.depth_slider.value() == 14  # the depth Auto chose, not the last manual one
    assert window.progress.maximum() == 100
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([Finished(FinishReason.EOS, GenerationStats(rounds=1, generated=15))])
    assert window.page.regenerate_button.isEnabled() and window.stats.measure_button.isEnabled()


def test_the_speedup_is_measured_per_pair_and_settings(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    assert len(host.calibrations) == 1  # calibrated once, right after loading, before any reply
    key = host.calibrations[0]
    assert "/models/target.gguf|/models/draft.gguf" in key and "T=0" in key
    host.worker.baseline_measured.emit(Baseline(key, 20.0, 48, time.time()))
    assert window.stats.plain.text() == "20.0 tok/s, just now"
    window.send("go")
    host.worker.events.emit([verified(0, tuple("abcdefgh"), (), "i")])  # 9 tokens: too few for a rate
    assert window.stats.speedup.text() == "–"
    assert host.requests[-1].params.plain_probe > 0  # the window asks the engine to time plain decoding after it
    stats = GenerationStats(
        rounds=2,
        drafted=16,
        accepted=16,
        generated=18,
        generate_seconds=0.5,
        plain_tokens_per_second=24.0,
        plain_tokens=16,
    )
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([verified(1, tuple("jklmnopq"), (), "r"), Finished(FinishReason.EOS, stats)])
    assert window.stats.speedup.text() == "×1.50 measured"  # 36 tok/s over the 24 timed right after it
    assert "24.0" in window.stats.speedup.toolTip() and "right after" in window.stats.speedup.toolTip()
    assert window.stats.plain.text() == "24.0 tok/s\nright after this reply"  # the ratio's own denominator
    assert "20.0" not in window.stats.plain.toolTip() and "24.0 tok/s, just now" in window.stats.plain.toolTip()
    assert len(host.calibrations) == 1
    # Other settings: the old baseline is not used; it is measured again once a reply ends without a probe.
    window.controls.temperature.setValue(0.7)
    window.send("again")
    assert window.stats.plain.text() == "not measured"
    unprobed = GenerationStats(rounds=2, drafted=16, accepted=16, generated=18, generate_seconds=0.5)
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit(
            [verified(0, tuple("abcdefghijklmnopq"), (), "r"), Finished(FinishReason.EOS, unprobed)]
        )
    assert window.stats.speedup.text() == "not measured" and "not timed" in window.stats.speedup.toolTip()
    assert window.stats.plain.text() == "not timed after this reply"
    assert len(host.calibrations) == 2 and "T=0.7" in host.calibrations[-1]
    # Another pair never gets this pair's baseline.
    window.controls.temperature.setValue(0.0)
    other = ModelInfo("/models/other.gguf", "", "other.gguf", None, n_ctx=4096)
    host.worker.loaded.emit(other)
    assert window.stats.baseline is None and "/models/other.gguf|" in host.calibrations[-1]
    assert window.stats.plain.text() == "not timed after this reply" and "newest" not in window.stats.plain.toolTip()


def test_regenerated_replies_are_versions_to_flip_between(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    two_versions(qtbot, window, host)
    last = window.transcript.messages[-1]
    assert (last.content, last.version, last.versions) == ("Blue", 2, 2)
    assert "‹ 2/2 ›" in window.chat_view.toPlainText()
    actions = {a.text(): a for a in window.chat_view.message_actions(1)}
    assert not actions["Next version (2/2)"].isEnabled()
    actions["Previous version (2/2)"].trigger()
    assert [m.content for m in window.transcript.messages] == ["Name a colour", "Red"]
    assert "‹ 1/2 ›" in window.chat_view.toPlainText()
    window.menu_actions.next_version.trigger()
    assert window.transcript.messages[-1].content == "Blue"
    window.menu_actions.previous_version.trigger()
    assert [m.content for m in window.transcript.messages] == ["Name a colour", "Red"]
    assert "Red" in window.chat_view.toPlainText() and "Blue" not in window.chat_view.toPlainText()
    window.menu_actions.next_version.trigger()
    assert window.transcript.messages[-1].content == "Blue"


def test_system_prompts_per_conversation_and_by_default(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    dialog = window.dialogs.default_system_prompt()
    dialog.editor.setPlainText("Answer in one sentence.")
    dialog.accept()
    window.new_conversation()
    window.send("Why is the sky blue?")
    assert host.requests[-1].history == [{"role": "system", "content": "Answer in one sentence."}]
    assert store.conversation(window.conversation_id).system_prompt == "Answer in one sentence."
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([verified(0, ("Ray",), (), "leigh"), Finished(FinishReason.EOS, GenerationStats())])
    dialog = window.dialogs.system_prompt()
    assert dialog.editor.toPlainText() == "Answer in one sentence."
    dialog.editor.setPlainText("Answer like a pirate.")
    dialog.accept()
    window.send("And at sunset?")
    assert host.requests[-1].history[0] == {"role": "system", "content": "Answer like a pirate."}
    window.close()
    assert load_settings().system_prompt == "Answer in one sentence."
