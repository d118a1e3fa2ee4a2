"""The window's rough edges (issue 27), each driven through the real widgets and a fake engine host."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest
from PySide6.QtCore import QPoint, QPointF, QRect, Qt
from PySide6.QtGui import QTextCursor, QWheelEvent
from PySide6.QtWidgets import (
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QStyle,
    QStyleOptionComboBox,
    QStyleOptionViewItem,
    QWidget,
)

from specchat.core.chat.baseline import Baseline
from specchat.core.engine.registry import Part, drafter_entry
from specchat.core.remote import ServerReport
from specchat.core.types import DrafterKind, Finished, FinishReason, GenerationStats
from specchat.ui.main_window import MainWindow
from specchat.ui.remote_devices import RemoteDevicesDialog
from support.contrast import drawn_contrast
from support.events import drafted, verified
from support.fake_host import FakeHost, two_versions, window_with
from support.qt_items import tree_row
from support.views import char_point, stream, streaming_view
from support.xray import xray_round


def wheel(widget: QWidget, steps: int = -1) -> None:
    """One notch of the mouse wheel over the middle of ``widget`` (negative: towards the user, scrolling down)."""
    local = QPointF(widget.width() / 2, widget.height() / 2)
    event = QWheelEvent(
        local,
        QPointF(widget.mapToGlobal(local.toPoint())),
        QPoint(0, 0),
        QPoint(0, 120 * steps),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)


def _values(root: QWidget) -> dict[str, object]:
    out: dict[str, object] = {}
    for i, w in enumerate(root.findChildren(QWidget)):
        if isinstance(w, QAbstractSpinBox):
            out[f"{i} {type(w).__name__}"] = w.text()
        elif isinstance(w, QComboBox):
            out[f"{i} combo"] = w.currentIndex()
        elif isinstance(w, QAbstractSlider):
            out[f"{i} slider"] = w.value()
    return out


def test_the_wheel_over_the_settings_panel_scrolls_it_and_changes_no_value(qtbot, settings, store) -> None:
    settings.depth = 4  # the slider enabled, as a user who fixed the depth has it
    window, _ = window_with(qtbot, settings, store)
    window.resize(900, 600)
    window.show()
    qtbot.waitExposed(window)
    bar = window.panel.verticalScrollBar()
    assert bar.maximum() > 0  # the panel scrolls at this size
    inside = window.panel.widget()
    assert inside is not None
    before = _values(inside)
    fields = [
        w
        for w in inside.findChildren(QWidget)
        if isinstance(w, (QAbstractSpinBox, QComboBox, QAbstractSlider)) and w.isVisible()
    ]
    assert len(fields) >= 8  # depth, drafter, temperature, top-k, top-p, repeat penalty, max tokens, context
    for field in fields:
        bar.setValue(0)
        wheel(field, -1)
        wheel(field, +1)
        wheel(field, -1)
        assert bar.value() > 0, type(field).__name__  # the wheel scrolled the panel instead
    assert _values(inside) == before
    assert window.controls.context_size.value() == settings.n_ctx
    # Once clicked into, a field takes the wheel as usual.
    window.controls.max_tokens.setFocus()
    qtbot.waitUntil(window.controls.max_tokens.hasFocus)
    value = window.controls.max_tokens.value()
    wheel(window.controls.max_tokens, +1)
    assert window.controls.max_tokens.value() == value + 1


def test_the_error_banner_and_the_charts_follow_the_dark_theme(qtbot, settings, store) -> None:
    window, _ = window_with(qtbot, settings, store)
    window.show()
    qtbot.waitExposed(window)
    try:
        for theme in ("light", "dark", "light"):
            window.look.set_theme(theme)
            window.show_error("the prompt does not fit in the context")
            qtbot.wait(10)
            background, best = drawn_contrast(window.banner)
            assert best >= 7, (theme, background.name(), best)  # its text reads (black on grey was 1.4:1)
            assert (background.lightness() < 100) == (theme == "dark"), background.name()
            for view in (window.stats.chart_view, window.stats.curve_view):
                chart_background, chart_best = drawn_contrast(view)
                assert (chart_background.lightness() < 100) == (theme == "dark"), (theme, chart_background.name())
                assert chart_best >= 4.5  # the axis labels read on it
    finally:
        window.look.set_theme("system")


@pytest.mark.parametrize("verdicts", [False, True], ids=["reading", "verdicts"])
def test_a_click_on_blank_space_under_or_beside_a_reply_opens_nothing(qtbot, verdicts: bool) -> None:
    view = streaming_view(qtbot, "Say it", verdicts=verdicts)
    view.resize(600, 400)
    view.show()
    qtbot.waitExposed(view)
    stream(view, [xray_round(1, 0, correction=51), Finished(FinishReason.EOS, GenerationStats())])
    view.flush()
    end = QTextCursor(view.document())
    end.movePosition(QTextCursor.MoveOperation.End)
    last_line = view.cursorRect(end)
    below = QPoint(last_line.x() // 2 + 20, last_line.bottom() + 60)
    beside = QPoint(view.viewport().width() - 30, last_line.center().y())
    assert below.y() < view.viewport().height()  # blank space under the reply, inside the view
    for point in (below, beside):
        assert view.token_at(point) is None
        # Through the window system, as a real click comes.
        qtbot.mouseClick(
            view.window().windowHandle(), Qt.MouseButton.LeftButton, pos=view.viewport().mapTo(view.window(), point)
        )
        qtbot.wait(20)  # the X-ray would open right after the click
        assert view.xray is None or not view.xray.isVisible()
    # The last token itself still opens it.
    cursor = QTextCursor(view.document())
    cursor.setPosition(end.position() - 1)
    while view.token_at(char_point(view, cursor.position())) is None:
        cursor.movePosition(QTextCursor.MoveOperation.PreviousCharacter)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=char_point(view, cursor.position()))
    qtbot.waitUntil(lambda: view.xray is not None and view.xray.isVisible())


def _click_text(qtbot, window: MainWindow, text: str) -> None:
    """A real click (through the window system) on the first occurrence of ``text`` in the chat."""
    view = window.chat_view
    found = view.document().find(text)
    assert not found.isNull(), text
    point = char_point(view, found.selectionStart())
    qtbot.mouseClick(window.windowHandle(), Qt.MouseButton.LeftButton, pos=view.viewport().mapTo(window, point))


def test_the_version_arrows_flip_versions(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    window.show()
    qtbot.waitExposed(window)
    two_versions(qtbot, window, host)
    assert "‹ 2/2 ›" in window.chat_view.toPlainText()
    _click_text(qtbot, window, "‹")
    qtbot.waitUntil(lambda: "‹ 1/2 ›" in window.chat_view.toPlainText())
    assert window.transcript.messages[-1].content == "Red"
    _click_text(qtbot, window, "‹")  # the first version: the left arrow does nothing
    qtbot.wait(20)
    assert window.transcript.messages[-1].content == "Red"
    _click_text(qtbot, window, "›")
    qtbot.waitUntil(lambda: "‹ 2/2 ›" in window.chat_view.toPlainText())
    assert window.transcript.messages[-1].content == "Blue"
    assert [m.content for m in store.messages(window.conversation_id)] == ["Name a colour", "Blue"]


def _cut_reply(qtbot, window: MainWindow, host: FakeHost) -> None:
    """A reply that the 6-token limit cut: 'Once upon a time, there' in three rounds."""
    window.controls.max_tokens.setValue(6)
    window.send("Tell me a story")
    stats = GenerationStats(rounds=2, drafted=4, accepted=3, generated=6, prompt_tokens=12, generate_seconds=0.4)
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit(
            [
                verified(0, ("Once", " upon"), (), " a"),
                verified(1, (" time",), (" in",), ","),
                verified(2, (), (), " there"),
                Finished(FinishReason.MAX_TOKENS, stats),
            ]
        )
    window.chat_view.flush()


@pytest.mark.parametrize("verdicts", [False, True], ids=["reading", "verdicts"])
def test_a_reply_cut_at_the_limit_says_so_and_continue_extends_it(qtbot, settings, store, verdicts: bool) -> None:
    settings.show_verdicts = verdicts
    window, host = window_with(qtbot, settings, store)
    window.show()
    qtbot.waitExposed(window)
    _cut_reply(qtbot, window, host)
    cid = window.conversation_id
    text, figures_line = window.chat_view.toPlainText().rsplit("\n", 1)  # the reply's figures line ends the page
    assert text.endswith(" there (stopped at the 6-token limit)  Continue") and "tok/s" in figures_line
    assert window.menu_actions.continue_reply.isEnabled()
    _click_text(qtbot, window, "Continue")
    qtbot.waitUntil(lambda: len(host.requests) == 2)
    request = host.requests[-1]
    assert request.user_text is None and request.continuation == "Once upon a time, there"
    assert request.history == [{"role": "user", "content": "Tell me a story"}]
    assert window.streaming and window.page.stop_button.isEnabled()
    assert "stopped at" not in window.chat_view.toPlainText() and "Continue" not in window.chat_view.toPlainText()
    # The continuation streams speculatively into the same message, with its fates.
    more = GenerationStats(rounds=1, drafted=3, accepted=2, generated=3, prompt_tokens=20, generate_seconds=0.2)
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit(
            [
                drafted(0, (" was", " a", " cat")),
                verified(0, (" was", " a"), (" cat",), " dog"),
                Finished(FinishReason.EOS, more),
            ]
        )  # the engine counts rounds from 0 again
    window.chat_view.flush()
    reply = window.transcript.messages[-1]
    assert len(window.transcript.messages) == 2
    assert reply.content == "Once upon a time, there was a dog" and reply.finish_reason == "eos"
    assert [s.text for s in reply.spans or [] if s.round == 3] == [" was", " a", " cat", " dog"]  # numbered on
    assert reply.figures is not None
    assert [r for r, _, _ in reply.figures.per_round] == [0, 1, 2, 3]  # the chart goes on to the right
    assert window.chat_view.toPlainText().rsplit("\n", 1)[0].endswith(" dog")
    assert "stopped at" not in window.chat_view.toPlainText()
    figures = reply.figures
    assert figures is not None and figures.final is not None
    assert (figures.final.generated, figures.final.drafted, figures.final.accepted) == (9, 7, 5)
    assert figures.final.prompt_tokens == 12 and abs(figures.final.generate_seconds - 0.6) < 1e-9
    assert window.stats.token_counts.text() == "prompt 12, generated 9"
    # Stored as one message, the same as shown, and read back so after a restart.
    stored = store.messages(cid)
    assert [m.content for m in stored] == ["Tell me a story", "Once upon a time, there was a dog"]
    assert stored[-1].finish_reason == "eos" and len(stored[-1].spans or []) == len(reply.spans or [])
    assert stored[-1].stats is not None and stored[-1].stats["generated"] == 9
    assert not window.menu_actions.continue_reply.isEnabled()


def test_a_continue_stopped_before_its_first_token_leaves_the_reply_as_it_was(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    _cut_reply(qtbot, window, host)
    window.continue_reply()
    assert window.streaming
    window.stop()
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([Finished(FinishReason.CANCELLED, GenerationStats())])
    window.chat_view.flush()
    assert "(stopped at the 6-token limit)  Continue" in window.chat_view.toPlainText()
    assert store.messages(window.conversation_id)[-1].finish_reason == "max_tokens"
    assert window.menu_actions.continue_reply.isEnabled()


def test_figures_come_back_after_switching_away_and_back_mid_reply(qtbot, settings, store) -> None:
    other = store.create_conversation("Other")
    window, host = window_with(qtbot, settings, store)
    host.worker.baseline_measured.emit(Baseline(host.calibrations[-1], 1e6, 48, time.time()))
    window.send("count")
    streaming = window.conversation_id
    host.worker.events.emit([verified(0, tuple("abcdefghijklmnop"), (), "q")])
    assert window.stats.tokens_per_second.text() != "–" and window.stats.speedup.text().endswith("so far")
    window.chat.open_conversation(other)
    assert window.stats.tokens_per_second.text() == "–"
    window.chat.open_conversation(streaming)
    assert window.stats.tokens_per_second.text() != "–", window.stats.tokens_per_second.text()
    assert window.stats.speedup.text().startswith("≈×") and window.stats.speedup.text().endswith("so far")
    host.worker.events.emit([verified(1, tuple("abcd"), (), "e")])
    assert window.stats.token_counts.text() == "generated 22"


@pytest.mark.slow
def test_continue_on_the_real_pair_goes_on_speculatively_in_the_same_message(qtbot, settings, store, demo_pair) -> None:
    settings.max_tokens, settings.depth, settings.temperature = 12, 4, 0.0
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.models_loaded, timeout=120_000):
        window.load_models(demo_pair.target, demo_pair.draft)
    with qtbot.waitSignal(window.reply_finished, timeout=300_000) as first:
        window.send("List the days of the week, one per line.")
    assert first.args[0].reason is FinishReason.MAX_TOKENS
    window.chat_view.flush()
    cut = window.transcript.messages[-1].content
    assert "(stopped at the 12-token limit)" in window.chat_view.toPlainText()
    assert window.menu_actions.continue_reply.isEnabled()
    with qtbot.waitSignal(window.reply_finished, timeout=300_000) as second:
        window.menu_actions.continue_reply.trigger()
    finished = second.args[0]
    assert finished.reason in (FinishReason.MAX_TOKENS, FinishReason.EOS)
    assert finished.stats.reused_prompt_tokens > 0  # the cache of the reply so far was kept
    reply = window.transcript.messages[-1]
    assert len(window.transcript.messages) == 2 and reply.content.startswith(cut) and len(reply.content) > len(cut)
    assert reply.figures is not None and reply.figures.final is not None
    assert reply.figures.final.generated == reply.figures.generated > 12 and reply.figures.accepted > 0
    stored = store.messages(window.conversation_id)
    assert [m.role for m in stored] == ["user", "assistant"] and stored[-1].content == reply.content
    assert stored[-1].spans == reply.spans


def test_reading_a_long_prompt_shows_tokens_and_percent_and_esc_stops_it(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    window.show()
    qtbot.waitExposed(window)
    window.send("a long paste")
    assert window.statusBar().currentMessage() == "Reading the prompt…"
    host.worker.prompt_progress.emit(1024, 3638)
    assert window.progress.isVisible() and window.progress.value() == 28 and window.progress.text() == "prompt 28%"
    assert window.statusBar().currentMessage() == "Reading the prompt: 1,024 of 3,638 tokens (28%), Esc stops"
    host.worker.prompt_progress.emit(2048, 3638)
    assert window.progress.value() == 56
    qtbot.keyClick(window.composer, Qt.Key.Key_Escape)
    assert host.tokens[-1].cancelled
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit(
            [Finished(FinishReason.CANCELLED, GenerationStats(prompt_tokens=3639), "stopped while reading the prompt")]
        )
    assert not window.progress.isVisible() and window.statusBar().currentMessage() == ""
    assert not window.streaming and window.page.send_button.isEnabled()


def test_test_in_remote_devices_probes_the_typed_address_without_adding_it(qtbot) -> None:
    probed: list[list[str]] = []

    def probe(servers: Sequence[str]) -> list[ServerReport]:
        probed.append(list(servers))
        return [ServerReport(s, error=f"cannot reach the remote server at {s}") for s in servers]

    dialog = RemoteDevicesDialog(["10.0.0.1:50052"], probe)
    qtbot.addWidget(dialog)
    dialog.entry.setText("10.0.0.2:50052")
    dialog.test_button.click()
    qtbot.waitUntil(lambda: not dialog.testing)
    assert probed == [["10.0.0.1:50052", "10.0.0.2:50052"]]
    assert dialog.servers() == ["10.0.0.1:50052"] and dialog.entry.text() == "10.0.0.2:50052"
    assert dialog.status.text() == "Both servers failed"
    dialog.entry.setText("not an address")
    dialog.test_button.click()
    assert "is not HOST:PORT" in dialog.status.text() and len(probed) == 1 and not dialog.testing
    dialog.add_button.click()  # Add still adds
    dialog.entry.setText("10.0.0.2:50052")
    dialog.add_button.click()
    assert dialog.servers() == ["10.0.0.1:50052", "10.0.0.2:50052"]


def test_the_pickers_recommended_table_shows_every_cell_whole(qtbot) -> None:
    from specchat.ui.model_picker import ModelPickerDialog

    dialog = ModelPickerDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    tab = dialog.catalog_tab
    assert tab is not None
    dialog.tabs.setCurrentWidget(tab)
    qtbot.waitExposed(dialog)
    tree = tab.tree
    header = tree.header()
    qtbot.waitUntil(lambda: header.length() <= tree.viewport().width())  # no column beyond the right edge
    delegate = tree.itemDelegate()
    option = QStyleOptionViewItem()
    tree.initViewItemOption(option)
    option.rect = QRect(0, 0, 0, 1 << 16)
    for row in range(tree.topLevelItemCount()):
        item = tree_row(tree, row)
        for column in range(tree.columnCount()):
            index = tree.indexFromItem(item, column)
            option.rect.setWidth(header.sectionSize(column))
            need = delegate.sizeHint(option, index)
            # As tall as its wrapped text, and as wide as its longest word.
            assert tree.visualRect(index).height() >= need.height(), (item.text(column), need)
            longest = max(item.text(column).split(), key=option.fontMetrics.horizontalAdvance)
            assert option.fontMetrics.horizontalAdvance(longest) < header.sectionSize(column), longest


def test_the_drafter_box_shows_each_drafters_name_whole_at_900_by_600(qtbot, settings, store) -> None:
    window, _ = window_with(qtbot, settings, store)
    window.resize(900, 600)
    window.show()
    qtbot.waitExposed(window)
    box = window.controls.drafter
    option = QStyleOptionComboBox()
    box.initStyleOption(option)
    field = box.style().subControlRect(
        QStyle.ComplexControl.CC_ComboBox, option, QStyle.SubControl.SC_ComboBoxEditField, box
    )
    names = [box.itemText(i) for i in range(box.count())] + [
        drafter_entry(DrafterKind.COMPOSITE).label_for({Part.MTP_HEADS.value})
    ]
    for name in names:
        assert box.fontMetrics().horizontalAdvance(name) <= field.width(), (name, field.width())


def test_the_window_title_is_the_open_conversations(qtbot, settings, store) -> None:
    older = store.create_conversation("Carrot recipes")
    window, host = window_with(qtbot, settings, store)
    assert window.windowTitle() == "specchat"
    window.send("Why is the sky blue?")
    assert window.windowTitle() == "Why is the sky blue? \u2014 specchat"
    window.chat.open_conversation(older)
    assert window.windowTitle() == "Carrot recipes \u2014 specchat"
    window.chat.rename(older, "Roasted carrots")
    assert window.windowTitle() == "Roasted carrots \u2014 specchat"


def test_the_markdown_export_gives_acceptance_as_a_percentage(qtbot, settings, store, tmp_path) -> None:
    window, host = window_with(qtbot, settings, store)
    window.send("hi")
    stats = GenerationStats(rounds=1, drafted=4, accepted=3, generated=4, generate_seconds=0.5)
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([verified(0, ("a", "b", "c"), ("x",), "d"), Finished(FinishReason.EOS, stats)])
    window.dialogs.export("md", str(tmp_path / "out.md"))
    text = (tmp_path / "out.md").read_text(encoding="utf-8")
    assert "*8.0 tokens/s, acceptance 75%*" in text and "0.75" not in text


def test_the_depth_slider_keeps_its_place_after_a_reply_fails_before_any_round(qtbot, settings, store) -> None:
    settings.depth = None  # Auto: the slider shows the depth the controller chose
    window, host = window_with(qtbot, settings, store)
    window.send("go")
    host.worker.events.emit([drafted(0, ("a", "b", "c")), verified(0, ("a", "b", "c"), (), "d")])
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([Finished(FinishReason.EOS, GenerationStats())])
    assert window.controls.depth_slider.value() == 3
    window.send("a prompt longer than the context")
    with qtbot.waitSignal(window.reply_finished):
        host.worker.failed.emit("the conversation is 5000 tokens but the context holds 4096")
    assert "context holds 4096" in window.banner.text()
    assert window.controls.depth_slider.value() == 3
