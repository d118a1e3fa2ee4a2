"""Widgets without a model: composer keys, controls, stats panel, sidebar, welcome page, main window shell."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMenu

from specchat.core.chat.baseline import Baseline
from specchat.core.chat.store import ReplyWriter
from specchat.core.chat.transcript import ReplyFigures
from specchat.core.settings import Settings, load_settings
from specchat.core.types import DrafterKind, Finished, FinishReason, GenerationStats
from specchat.ui.composer import Composer
from specchat.ui.controls import GpuLayersBox, SpeculationControls
from specchat.ui.main_window import MainWindow
from specchat.ui.model_picker import ModelPickerDialog
from specchat.ui.sidebar import ConversationSidebar
from specchat.ui.stats_panel import StatsPanel
from specchat.ui.window_layout import SettingsPanel
from support.events import drafted, verified
from support.fake_host import FakeHost


def test_composer_enter_sends_shift_enter_newline(qtbot) -> None:
    composer = Composer()
    qtbot.addWidget(composer)
    qtbot.keyClicks(composer, "hello")
    qtbot.keyClick(composer, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(composer, "there")
    assert composer.toPlainText() == "hello\nthere"
    with qtbot.waitSignal(composer.send_requested) as blocker:
        qtbot.keyClick(composer, Qt.Key.Key_Return)
    assert blocker.args == ["hello\nthere"]
    assert composer.toPlainText() == "hello\nthere"  # kept until the window takes it


def test_controls_depth_auto_and_params(qtbot) -> None:
    controls = SpeculationControls(Settings(depth=3, drafter=DrafterKind.NGRAM, temperature=0.5, max_tokens=77))
    qtbot.addWidget(controls)
    assert controls.chosen_depth == 3 and controls.drafter_kind is DrafterKind.NGRAM
    with qtbot.waitSignal(controls.depth_changed) as blocker:
        controls.depth_slider.setValue(9)
    assert blocker.args == [9]
    with qtbot.waitSignal(controls.depth_changed) as blocker:
        controls.auto_depth.setChecked(True)
    assert blocker.args == [None] and not controls.depth_slider.isEnabled()
    params = controls.generation_params()
    assert params.max_tokens == 77 and params.sampler.temperature == 0.5
    s = Settings()
    controls.store_settings(s)
    assert s.depth is None and s.drafter is DrafterKind.NGRAM and s.max_tokens == 77


def test_stats_panel_counts_and_charts(qtbot) -> None:
    panel = StatsPanel()
    qtbot.addWidget(panel)
    panel.follow(ReplyFigures())
    assert panel.acceptance.text() == "–"
    feed(panel, [drafted(0, ("a", "b", "c")), verified(0, ("a", "b"), ("c",), "d"), verified(1, ("e",), (), "f")])
    assert panel.acceptance.text() == "75%"
    assert panel.mean_accepted.text() == "1.50"
    assert panel.depth_value.text() == "1"
    assert panel.speedup.text() == "–"  # 5 tokens: too few for a rate
    assert panel.accepted_series.count() == 2 and panel.accepted_series.at(0).y() == 2
    assert [panel.depth_series.at(i).y() for i in range(2)] == [3, 1]
    stats = GenerationStats(rounds=2, generated=5, generate_seconds=1.0, prompt_tokens=40)
    feed(panel, [Finished(FinishReason.EOS, stats)])
    panel.set_context_size(512)
    assert panel.tokens_per_second.text() == "5.0"
    assert panel.token_counts.text() == "prompt 40, generated 5" and panel.context_used.text() == "45 / 512"
    assert panel.first_token.text().endswith(" s")
    panel.reset()
    assert panel.accepted_series.count() == 0 and panel.depth_series.count() == 0


def test_the_chart_comes_back_with_a_stored_reply(qtbot) -> None:
    panel = StatsPanel()
    qtbot.addWidget(panel)
    panel.follow(ReplyFigures(started=time.monotonic() - 0.25))  # the request went out 0.25 s ago
    feed(
        panel,
        [
            verified(0, ("a", "b"), ("c",), "d"),
            verified(1, ("e",), (), "f"),
            Finished(
                FinishReason.EOS, GenerationStats(rounds=2, drafted=4, accepted=3, generated=5, generate_seconds=1.0)
            ),
        ],
    )
    stored = ReplyFigures.from_dict(panel.figures.as_dict())
    panel.reset()
    panel.show_stored(stored)
    # rounds counted from 1 on screen, as in the token X-ray (the engine's 0 and 1)
    assert [(p.x(), p.y()) for p in panel.depth_series.points()] == [(1, 3), (2, 1)]
    assert [(p.x(), p.y()) for p in panel.accepted_series.points()] == [(1, 2), (2, 1)]
    assert panel.first_token.text() == "0.25 s"


def test_sidebar_lists_renames_deletes(qtbot, store) -> None:
    sidebar = ConversationSidebar()
    qtbot.addWidget(sidebar)
    a = store.create_conversation("first")
    b = store.create_conversation("second")
    sidebar.set_conversations(store.conversations(), a)
    assert sidebar.current_id() == a and sidebar.list.count() == 2
    with qtbot.waitSignal(sidebar.selected) as blocker:
        sidebar.list.setCurrentRow(0)
    assert blocker.args == [b]
    with qtbot.waitSignal(sidebar.rename_requested) as blocker:
        sidebar.list.item(0).setText("renamed")
    assert blocker.args == [b, "renamed"]
    with qtbot.waitSignal(sidebar.delete_requested) as blocker:
        sidebar.delete_button.click()
    assert blocker.args == [b]


def test_main_window_first_run_and_stored_conversations(qtbot, settings, store, tmp_path) -> None:
    cid = store.create_conversation("Old chat")
    store.add_message(cid, "user", "hi")
    writer = ReplyWriter(store, cid)
    writer.feed(verified(0, ("Hel",), ("p",), "lo"))
    writer.feed(Finished(FinishReason.EOS, GenerationStats(rounds=1, drafted=2, accepted=1, generated=2)))
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    assert window.stack.currentWidget() is window.welcome
    assert not window.composer.isEnabled() and not window.stats.measure_button.isEnabled()
    assert window.sidebar.list.count() == 1
    window.sidebar.list.setCurrentRow(0)
    assert window.conversation_id == cid
    assert [m.content for m in window.transcript.messages] == ["hi", "Hello"]
    assert window.stats.acceptance.text() == "50%"
    window.look.set_hide_rejected(True)
    assert "p" not in window.chat_view.toPlainText().split("\n")[-1]
    out = tmp_path / "chat.md"
    window.dialogs.export("md", str(out))
    assert "**Assistant**\n\nHello" in out.read_text()
    window.send("no model yet")
    assert window.last_error == "load a model first"
    window.sidebar.new_button.click()
    assert window.sidebar.list.count() == 2 and window.transcript.messages == []
    window.chat.delete_conversation(cid)
    assert [c.id for c in store.conversations()] != [] and cid not in [c.id for c in store.conversations()]
    window.welcome.picker_button.click()
    picker = window.findChild(ModelPickerDialog)
    assert picker is not None and picker.isVisible()
    picker.reject()
    window.close()
    assert load_settings().hide_rejected is True


def test_bad_model_file_shows_one_line_error(qtbot, settings, store, tmp_path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.error_shown, timeout=30000) as blocker:
        window.load_models(bad)
    message = blocker.args[0]
    assert message and "\n" not in message
    assert window.stack.currentWidget() is window.welcome and window.model_info is None


def test_corrupt_database_notice_in_window(qtbot, settings, app_dirs) -> None:
    from specchat.core.chat.store import DB_FILENAME, ConversationStore

    (app_dirs["data"] / DB_FILENAME).write_bytes(b"garbage" * 500)
    store = ConversationStore()
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    assert "could not be read" in window.last_error and window.banner.isVisibleTo(window)
    window.close()
    store.close()


def test_edit_puts_text_back_and_abandoning_it_loses_nothing(qtbot, settings, store) -> None:
    cid = store.create_conversation("Edit me")
    store.add_message(cid, "user", "first question")
    writer = ReplyWriter(store, cid)
    writer.feed(verified(0, ("An",), (), "swer"))
    writer.feed(Finished(FinishReason.EOS, GenerationStats(rounds=1, drafted=1, accepted=1, generated=2)))
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    window.chat.open_conversation(cid)
    actions = window.chat_view.message_actions(0)
    assert [a.text() for a in actions] == ["Copy message", "Edit and resend"]
    actions[1].trigger()
    assert window.composer.toPlainText() == "first question"
    assert window.transcript.messages == []
    # Nothing is deleted until the edited message is sent and its reply has a first round.
    assert [m.content for m in store.messages(cid)] == ["first question", "Answer"]
    window.composer.setEnabled(True)  # as with a model loaded
    window.composer.setFocus()
    qtbot.keyClick(window.composer, Qt.Key.Key_Escape)  # abandon the edit
    assert [m.content for m in window.transcript.messages] == ["first question", "Answer"]
    assert window.composer.toPlainText() == ""
    assert [m.content for m in store.messages(cid)] == ["first question", "Answer"]


def feed(panel: StatsPanel, events: Sequence[object]) -> None:
    """What the window does for the panel: the transcript folds the events, the panel shows them."""
    panel.figures.fold(events)
    panel.refresh()


def fake_window(qtbot, settings, store) -> tuple[MainWindow, FakeHost]:
    host = FakeHost()
    window = MainWindow(settings, store, host=host.as_host())
    qtbot.addWidget(window)
    host.loaded()
    return window, host


def test_a_failing_database_write_is_reported_and_the_reply_still_ends(qtbot, settings, store, monkeypatch) -> None:
    import sqlite3

    window, host = fake_window(qtbot, settings, store)

    def broken(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    window.send("hi")
    monkeypatch.setattr(store, "start_reply", broken)
    monkeypatch.setattr(store, "append_spans", broken)
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([verified(0, ("a",), (), "b"), Finished(FinishReason.EOS, GenerationStats())])
    assert window.last_error == "the reply could not be saved: disk I/O error"
    assert window.transcript.messages[-1].content == "ab" and not window.streaming
    assert window.chat_view.toPlainText().endswith("ab")


def test_escape_cancels_the_streaming_reply(qtbot, settings, store) -> None:
    window, host = fake_window(qtbot, settings, store)
    window.send("hi")
    assert window.streaming and window.page.stop_button.isEnabled()
    window.composer.setFocus()
    qtbot.keyClick(window.composer, Qt.Key.Key_Escape)
    assert host.tokens[-1].cancelled


def test_a_reply_streams_through_the_window_from_the_host(qtbot, settings, store) -> None:
    window, host = fake_window(qtbot, settings, store)
    window.send("Say hello")
    request = host.requests[-1]
    assert request.history == [] and request.user_text == "Say hello"
    assert not window.page.regenerate_button.isEnabled() and not window.page.send_button.isEnabled()
    host.worker.events.emit([drafted(0, ("Hel", "lo")), verified(0, ("Hel", "lo"), (), "!")])
    window.chat_view.flush()
    assert window.transcript.reply is not None and window.transcript.reply.content == "Hello!"
    assert window.stats.acceptance.text() == "100%"
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit(
            [
                Finished(
                    FinishReason.EOS,
                    GenerationStats(rounds=1, drafted=2, accepted=2, generated=3, generate_seconds=0.5),
                )
            ]
        )
    assert window.stats.tokens_per_second.text() == "6.0"
    assert window.stats.conversation.text() == "1 reply, 3 tokens"
    assert window.page.regenerate_button.isEnabled()
    stored = store.messages(window.conversation_id)
    assert [(m.role, m.content) for m in stored] == [("user", "Say hello"), ("assistant", "Hello!")]
    # The next request carries the history from the transcript.
    window.send("Again")
    assert host.requests[-1].history == [
        {"role": "user", "content": "Say hello"},
        {"role": "assistant", "content": "Hello!"},
    ]


def test_the_plain_row_gets_the_height_of_its_two_lines_in_the_side_panel(qtbot) -> None:
    """After a reply ends, the "Plain decoding" row is two lines tall, so it does not run over the next row."""
    panel = SettingsPanel(Settings(), offload=False)
    qtbot.addWidget(panel)
    panel.resize(290, 500)  # narrow and scrolling, as in a 1400x900 window
    panel.show()
    stats = panel.stats
    stats.follow(ReplyFigures())
    feed(stats, [verified(0, tuple("abcd"), (), "q")])
    feed(
        stats,
        [
            Finished(
                FinishReason.EOS,
                GenerationStats(
                    rounds=1,
                    drafted=4,
                    accepted=4,
                    generated=5,
                    generate_seconds=0.5,
                    plain_tokens_per_second=21.3,
                    plain_tokens=16,
                ),
            )
        ],
    )
    qtbot.waitUntil(lambda: stats.plain.height() >= 2 * stats.fontMetrics().height())
    assert stats.plain.geometry().bottom() < stats.speedup.geometry().top()


def test_a_finished_replys_speedup_is_its_own_probes_stored_and_never_recomputed(qtbot) -> None:
    panel = StatsPanel()
    qtbot.addWidget(panel)

    def finish(plain: float, plain_tokens: int = 16) -> None:
        panel.follow(ReplyFigures())
        feed(panel, [verified(0, tuple("abcdefghijklmnop"), (), "q")])  # 17 tokens in one pass: at most ×17
        stats = GenerationStats(
            rounds=1,
            drafted=16,
            accepted=16,
            generated=17,
            generate_seconds=0.5,
            plain_tokens_per_second=plain,
            plain_tokens=plain_tokens,
        )
        feed(panel, [Finished(FinishReason.EOS, stats)])

    finish(10.0)
    assert panel.speedup.text() == "×3.40 measured"  # 34 tok/s over the 10 timed right after
    assert "right after the reply" in panel.speedup.toolTip() and "16 tokens" in panel.speedup.toolTip()
    assert panel.plain.text() == "10.0 tok/s\nright after this reply"  # the ratio's denominator, beside it
    panel.set_baseline(Baseline("k", 40.0, 48, time.time()))  # a newer plain figure changes nothing
    assert panel.speedup.text() == "×3.40 measured" and panel.plain.text() == "10.0 tok/s\nright after this reply"
    assert "40.0 tok/s, just now" in panel.plain.toolTip()  # the pair's newest is in the tooltip
    panel.show_stored(ReplyFigures.from_dict(panel.figures.as_dict()))
    assert panel.speedup.text() == "×3.40 measured" and panel.plain.text() == "10.0 tok/s\nright after this reply"
    panel.reset()  # no reply shown: the pair's newest figure
    assert panel.plain.text() == "40.0 tok/s, just now"

    finish(10.0148)  # shown as stored (2 decimals: 10.01), so it reads the same reopened
    live = [w.text() for w in (panel.tokens_per_second, panel.plain, panel.speedup)]
    panel.show_stored(ReplyFigures.from_dict(panel.figures.as_dict()))
    assert [w.text() for w in (panel.tokens_per_second, panel.plain, panel.speedup)] == live
    assert live == ["34.0", "10.0 tok/s\nright after this reply", "×3.40 measured"]  # 34 / 10.01, not 34 / 10.0148

    finish(1.0)  # ×34 from 17 tokens in one pass cannot be: the machine's speed moved
    assert panel.speedup.text() == "not measured" and "more than this reply's rounds allow" in panel.speedup.toolTip()
    finish(0.0, 0)  # stopped before plain decoding was timed: no figure, whatever the baseline
    assert panel.speedup.text() == "not measured" and "not timed" in panel.speedup.toolTip()


def test_a_streaming_replys_speedup_is_marked_as_so_far(qtbot) -> None:
    panel = StatsPanel()
    qtbot.addWidget(panel)
    panel.follow(ReplyFigures())
    feed(panel, [verified(0, tuple("abcdefghijklmnop"), (), "q")])
    assert panel.speedup.text() == "–"  # no plain figure yet
    panel.set_baseline(Baseline("k", 1e-3, 48, time.time()))
    assert panel.speedup.text() == "–"  # a figure above the reply's ceiling is never shown
    panel.set_baseline(Baseline("k", 1e6, 48, time.time()))
    assert panel.speedup.text().startswith("≈×") and panel.speedup.text().endswith("so far")
    assert "replaces this one" in panel.speedup.toolTip()


def test_gpu_layer_controls_only_when_the_build_can_offload(qtbot) -> None:
    settings = Settings(target_gpu_layers=12, draft_gpu_layers=-1)
    cpu_only = SpeculationControls(settings, offload=False)
    qtbot.addWidget(cpu_only)
    cpu_only.show()
    assert not cpu_only.target_gpu_layers.isVisible() and not cpu_only.draft_gpu_layers.isVisible()
    gpu = SpeculationControls(settings, offload=True)
    qtbot.addWidget(gpu)
    gpu.show()
    assert gpu.target_gpu_layers.isVisible() and gpu.draft_gpu_layers.text() == "all"
    assert gpu.target_gpu_layers.text() == "12"
    gpu.target_gpu_layers.setValue(30)
    gpu.draft_gpu_layers.setValue(0)
    out = Settings()
    gpu.store_settings(out)
    assert (out.target_gpu_layers, out.draft_gpu_layers) == (30, 0)
    # The default is "auto", shown as a word and stored as one.
    fresh = SpeculationControls(Settings(), offload=True)
    qtbot.addWidget(fresh)
    assert fresh.target_gpu_layers.text() == "auto" and fresh.draft_gpu_layers.text() == "auto"
    fresh.store_settings(out)
    assert (out.target_gpu_layers, out.draft_gpu_layers) == ("auto", "auto")


@pytest.mark.parametrize(("typed", "shown", "stored"), [("all", "all", -1), ("7", "7", 7), ("auto", "auto", "auto")])
def test_gpu_layer_box_accepts_words_and_numbers(qtbot, typed: str, shown: str, stored: object) -> None:
    box = GpuLayersBox()
    qtbot.addWidget(box)
    box.set_layers(3)
    box.show()
    box.lineEdit().selectAll()
    qtbot.keyClicks(box, typed)
    qtbot.keyClick(box, Qt.Key.Key_Return)
    assert box.text() == shown and box.layers() == stored
    # Stepping down from 0 walks through "all" to "auto" and stops there.
    box.set_layers(0)
    box.stepBy(-1)
    assert box.text() == "all"
    box.stepBy(-5)
    assert box.layers() == "auto"


def test_gpu_layer_box_refuses_other_words(qtbot) -> None:
    box = GpuLayersBox()
    qtbot.addWidget(box)
    box.set_layers(5)
    box.show()
    box.lineEdit().selectAll()
    qtbot.keyClicks(box, "most")
    qtbot.keyClick(box, Qt.Key.Key_Return)
    assert box.layers() == 5


def test_context_size_box_doubles_and_is_saved(qtbot) -> None:
    controls = SpeculationControls(Settings(n_ctx=4096), offload=False)
    qtbot.addWidget(controls)
    box = controls.context_size
    assert box.text() == "4096 tokens"
    with qtbot.waitSignal(controls.load_setting_changed):
        box.stepBy(1)
    assert box.value() == 8192
    box.stepBy(-3)
    assert box.value() == 1024
    box.stepBy(-10)
    assert box.value() == 256  # the smallest context the settings accept
    box.setValue(1 << 22)
    assert box.value() == 1 << 20
    box.setValue(6000)
    out = Settings()
    controls.store_settings(out)
    assert out.n_ctx == 6000


def test_repeat_penalty_reaches_the_sampler(qtbot) -> None:
    controls = SpeculationControls(Settings(), offload=False)
    qtbot.addWidget(controls)
    assert controls.generation_params().sampler.repeat_penalty == 1.1  # the app's default
    controls.repeat_penalty.setValue(1.0)
    assert controls.generation_params().sampler.repeat_penalty == 1.0
    out = Settings()
    controls.store_settings(out)
    assert out.repeat_penalty == 1.0


def test_about_box_shows_the_build(qtbot, settings, store) -> None:
    from specchat import __version__
    from specchat.core.llama import devices

    window = MainWindow(settings, store, build=devices.build_info())  # as the app's composition root does
    qtbot.addWidget(window)
    box = window.dialogs.about()
    qtbot.addWidget(box)
    assert __version__ in box.text()
    offload = "yes" if devices.offload_supported() else "no"
    assert f"GPU offload: {offload}" in box.informativeText() and "device: " in box.informativeText()
    assert "features: " in box.detailedText()
    help_menu = [a for a in window.menuBar().actions() if a.text() == "&Help"][0]
    menu = help_menu.menu()
    assert isinstance(menu, QMenu)
    assert [a.text() for a in menu.actions()] == ["&Keyboard shortcuts", "&About specchat"]


def test_a_reply_cut_short_by_a_crash_is_marked_after_a_restart(qtbot, settings, store) -> None:
    cid = store.create_conversation("Crashed")
    store.add_message(cid, "user", "hi")
    writer = ReplyWriter(store, cid)
    writer.feed(verified(0, ("Hel",), ("p",), "lo"))
    writer.feed(verified(1, (" the",), (), "re"))  # ... and the app died: no Finished
    stopped = store.create_conversation("Stopped")
    store.add_message(stopped, "user", "hi")
    writer = ReplyWriter(store, stopped)
    writer.feed(verified(0, ("Hi",), (), "!"))
    writer.feed(Finished(FinishReason.CANCELLED, GenerationStats(rounds=1, drafted=1, accepted=1, generated=2)))
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    window.chat.open_conversation(cid)
    assert window.chat_view.toPlainText().endswith("lo there (stopped: the app closed)")
    assert window.transcript.messages[-1].content == "Hello there"  # the mark is not part of the reply
    assert window.stats.acceptance.text() == "67%"  # the figures counted until the crash
    assert window.stats.tokens_per_second.text() == "–"  # no rate was measured
    window.chat.open_conversation(stopped)
    assert window.chat_view.toPlainText().endswith("Hi! (stopped)")


def test_the_fallback_s_three_lines_are_not_clipped_in_the_side_panel(qtbot) -> None:
    """Seen in the real window: the Depth row grew from one line to the fallback's three, and the form inside the
    scrolling side panel gave it two, the first and last cut in half. Each wrapped figure now holds the height its
    text needs at its width, also after the panel narrows, and gives it back when the text is short again."""
    from specchat.core.settings import Settings
    from specchat.ui.window_layout import SettingsPanel

    side = SettingsPanel(Settings(), offload=False)
    qtbot.addWidget(side)
    side.resize(320, 760)
    side.show()
    qtbot.waitExposed(side)
    panel, label = side.stats, side.stats.depth_value
    panel.follow(ReplyFigures())
    panel.set_auto_drafting(True)

    def shown(events: list[object]) -> int:
        """The label's height once the window has drawn the events (no later update: the reply has ended)."""
        feed(panel, events)
        qtbot.wait(30)
        return label.height()

    one_line = shown([verified(0, ("a", "b"), (), "c")])
    assert shown([verified(n, (), (), "x") for n in range(1, 5)]) == label.heightForWidth(label.width())
    assert "not paying" in label.text() and label.height() > 2 * one_line
    side.resize(side.minimumWidth(), 760)  # as narrow as the panel goes: the label's width changes with it
    qtbot.waitUntil(lambda: label.height() == label.heightForWidth(label.width()))
    assert shown([verified(5, ("d",), (), "e")]) == one_line


def test_the_panel_shows_the_same_figures_while_streaming_and_reopened(qtbot) -> None:
    panel = StatsPanel()
    qtbot.addWidget(panel)
    panel.follow(ReplyFigures())
    events = [verified(0, ("a", "b"), (), "c"), verified(1, (), (), "d"), verified(2, ("e", "f"), (), "g")]
    stats = GenerationStats(rounds=2, drafted=4, accepted=4, generated=7, generate_seconds=1.0, depth=2)
    feed(panel, [*events, Finished(FinishReason.EOS, stats)])
    live = [w.text() for w in (panel.tokens_per_second, panel.acceptance, panel.mean_accepted, panel.speedup)]
    panel.show_stored(ReplyFigures.from_dict(panel.figures.as_dict()))  # what the store keeps with the reply
    reopened = [w.text() for w in (panel.tokens_per_second, panel.acceptance, panel.mean_accepted, panel.speedup)]
    assert live == reopened and live[2] == "2.00"


def test_the_panel_says_when_auto_has_fallen_back_to_plain_decoding(qtbot) -> None:
    panel = StatsPanel()
    qtbot.addWidget(panel)
    panel.follow(ReplyFigures())
    panel.set_auto_drafting(True)
    feed(panel, [verified(0, ("a", "b"), (), "c")] + [verified(n, (), (), "x") for n in range(1, 4)])
    assert panel.depth_value.text() == "0"  # three plain rounds: not yet a fallback
    feed(panel, [verified(4, (), (), "y")])
    assert "speculation is not paying here right now" in panel.depth_value.text()
    assert "plain decoding faster" in panel.depth_value.toolTip()
    panel.set_auto_drafting(False)  # the user chose depth 0 or no drafter: nothing to explain
    assert panel.depth_value.text() == "0"
    feed(panel, [verified(5, ("d",), (), "e")])
    panel.set_auto_drafting(True)
    assert panel.depth_value.text() == "1"  # drafting again
