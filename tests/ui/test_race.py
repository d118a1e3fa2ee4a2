"""The race against plain decoding in the window: the replay's schedule (a fake clock), the panel, when the
menu entries are off, a race through the fake host, and a real race on the demo pair replayed after a restart."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QTextCursor

from specchat.core.cancel import CancelToken
from specchat.core.chat.race import RaceProgress
from specchat.core.chat.race_record import PLAIN as PLAIN_RUN
from specchat.core.chat.race_record import SPECULATIVE as SPEC_RUN
from specchat.core.chat.race_record import Block, Fork, RaceRecord, RaceRun
from specchat.core.chat.store import ConversationStore
from specchat.core.chat.transcript import Message, ReplyFigures, TokenSpan
from specchat.core.types import Finished, FinishReason, GenerationStats, TokenKind, Verified
from specchat.ui.chat_view import ChatView
from specchat.ui.main_window import MainWindow
from specchat.ui.race import PLAIN, PROP_DIFFERENCE, SPECULATIVE, RacePanel, RaceReplay
from support.events import verified
from support.fake_host import FakeHost, window_with


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_replay_shows_each_round_at_its_recorded_time_in_order(qtbot) -> None:
    clock = FakeClock()
    spec = [(0.25, 3, 10), (0.75, 2, 6)]
    plain = [(0.125, 1, 4), (0.5, 1, 2), (1.0, 1, 3)]
    replay = RaceReplay([spec, plain], clock)
    seen: list[tuple[int, int, int, float]] = []
    replay.progressed.connect(lambda *args: seen.append(args))
    done: list[bool] = []
    replay.finished.connect(lambda: done.append(True))

    replay.start()
    assert seen == [] and replay.running and replay.timer.interval() == 125  # aimed at the first recorded round
    steps = [
        (0.125, (PLAIN, 4, 1, 0.125), 125),
        (0.25, (SPECULATIVE, 10, 3, 0.25), 250),
        (0.5, (PLAIN, 6, 2, 0.5), 250),
        (0.75, (SPECULATIVE, 16, 5, 0.75), 250),
    ]
    for now, shown, next_ms in steps:
        clock.now = now
        replay.tick()  # what the timer's timeout runs
        assert seen[-1] == shown and replay.timer.interval() == next_ms and replay.running
    clock.now = 0.9
    replay.tick()  # early (a timer may fire a little early): nothing new, aimed at what is left
    assert len(seen) == 4 and replay.timer.interval() == 100 and not done
    clock.now = 1.0
    replay.tick()
    assert seen[-1] == (PLAIN, 9, 3, 1.0) and done == [True] and not replay.running

    seen.clear()
    clock.now = 10.0
    replay.start(2.0)  # twice as fast: half the waits
    assert replay.timer.interval() == 63  # 0.125 s recorded, ceil(62.5) ms
    clock.now = 10.5  # a late tick shows everything due, in recorded order
    replay.tick()
    assert [s[3] for s in seen] == [0.125, 0.25, 0.5, 0.75, 1.0] and done == [True, True]


def race_message(text: str = "Hello world") -> Message:
    spans = [
        TokenSpan(TokenKind.ACCEPTED, "Hello"),
        TokenSpan(TokenKind.REJECTED, " there"),
        TokenSpan(TokenKind.TARGET, " world"),
    ]
    figures = ReplyFigures(generated=2, timeline=[(0.5, 2, len(text))], first_token_seconds=0.25)
    return Message("assistant", spans=spans, figures=figures, finish_reason="eos", id=1)


def race_record(
    plain_text: str, plain_timeline: list[tuple[float, int, int]], *, fork: Fork | None = None, drift: str = ""
) -> RaceRecord:
    """A race whose speculative run wrote "Hello world" in one round at 0.5 s (its drafts "Hello")."""
    spec = RaceRun("Hello world", [(0.5, 2, 11)], 0.3, "eos", [(5, "a"), (6, "t")])
    plain = RaceRun(plain_text, plain_timeline, 0.1, "eos")
    blocks = [Block(SPEC_RUN, 2, 0.5), Block(PLAIN_RUN, 2, plain_timeline[-1][0])]
    return RaceRecord(spec, plain, blocks, "draft", 4, "target.gguf", fork=fork, expected_rate=2.5, drift=drift)


def test_the_panel_replays_both_texts_and_gives_times_and_ratio(qtbot) -> None:
    clock = FakeClock()
    record = race_record("Hello world", [(0.25, 1, 5), (0.8, 1, 6)])
    panel = RacePanel(race_message(), record, clock)
    qtbot.addWidget(panel)
    assert panel.summary.text() == "Speculative finished in 0.50 s, plain in 0.80 s: 1.60\u00d7 faster"
    assert panel.identity.text().startswith("Identical text")
    assert "target.gguf alone" in panel.plain.title.text() and "depth 4" in panel.spec.title.text()
    assert "taking turns in 2 blocks" in panel.note.text() and panel.drift.isHidden()
    panel.start()
    assert panel.spec.shown_text == "" and panel.plain.shown_text == ""
    clock.now = 0.25
    panel.replay.tick()
    assert panel.plain.shown_text == "Hello" and panel.spec.shown_text == ""
    clock.now = 0.5
    panel.replay.tick()
    assert panel.spec.shown_text == "Hello world"  # the rejected draft is not part of the text
    assert panel.spec.status.text() == "finished in 0.50 s \u00b7 2 tokens"
    assert panel.plain.status.text() == "0.25 s \u00b7 1 tokens"
    clock.now = 0.8
    panel.replay.tick()
    assert panel.plain.shown_text == "Hello world" and panel.plain.status.text().startswith("finished in 0.80 s")
    panel.start()  # replay from the start
    assert panel.spec.shown_text == "" and panel.replay.running


def test_the_panel_shows_the_first_difference(qtbot) -> None:
    fork = Fork(1, 5, " word", " world", ((" word", 0.5), (" world", 0.49)), 0.0204, 30.0)
    record = race_record("Hello word", [(0.25, 1, 5), (0.5, 1, 5)], fork=fork)
    clock = FakeClock()
    panel = RacePanel(race_message(), record, clock)
    qtbot.addWidget(panel)
    text = panel.identity.text()
    assert text.startswith("First difference at token 1: plain ' word', speculative ' world'; a float tie")
    assert "' word' 0.500, ' world' 0.490" in text
    assert "Speculative goes on: ' world'" in text and "Plain goes on: ' word'" in text
    panel.start()
    clock.now = 1.0
    panel.replay.tick()
    assert panel.spec.shown_text == "Hello world" and panel.plain.shown_text == "Hello word"
    for pane, piece in ((panel.spec, " world"), (panel.plain, " word")):
        marked = [frag for frag in fragments(pane) if frag[1]]
        assert [text for text, _ in marked] == [piece]  # the first differing token stands out on each side


def fragments(pane) -> list[tuple[str, bool]]:
    out = []
    block = pane.text.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            out.append((frag.text(), bool(frag.charFormat().property(PROP_DIFFERENCE))))
            it += 1
        block = block.next()
    return out


# -- in the window, through the fake host ------------------------------------------------


def stream_reply(window: MainWindow, host: FakeHost, *, finish: bool = True) -> None:
    window.send("hi")
    rounds = [
        dataclasses.replace(verified(0, ("Hel",), ("x",), "lo"), elapsed=0.2),
        dataclasses.replace(verified(1, (" wor",), (), "ld"), elapsed=0.35),
    ]
    host.worker.events.emit(rounds)
    if finish:
        host.worker.events.emit([Finished(FinishReason.EOS, GenerationStats(generated=4, generate_seconds=0.35))])


def test_a_race_runs_on_the_host_and_is_stored_with_the_reply(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    stream_reply(window, host)
    action = window.chat_view.race_action(1)
    assert action.text() == "Race plain decoding" and action.isEnabled()
    assert window.menu_actions.race.isEnabled()
    action.trigger()
    (request,) = host.races
    assert request.max_tokens == 4 and request.sampler.greedy and request.sampler.repeat_penalty == 1.1
    assert request.history == [{"role": "user", "content": "hi"}] and request.spec_pieces == ("Hel", "lo", " wor", "ld")
    race = window.menu_actions.race
    assert not race.isEnabled() and race.toolTip() == "a race is already running"
    assert host.requests[-1].conversation_id == window.conversation_id and len(host.requests) == 1  # no new reply

    record = race_record("Hello world", [(0.1, 1, 3), (0.2, 1, 2), (0.3, 1, 4), (0.4, 1, 2)])
    with qtbot.waitSignal(window.races.ready):
        host.worker.raced.emit(request, record)
    assert window.racing.panel is not None and window.racing.panel.replay.running
    stats = store.messages(window.conversation_id)[-1].stats
    assert RaceRecord.from_dict(stats["race"]) == record
    assert stats["timeline"] == [[0.2, 2, 5], [0.35, 2, 6]] and stats["sampler"]["temperature"] == 0.0
    assert [m.content for m in store.messages(window.conversation_id)] == ["hi", "Hello world"]  # nothing added
    again = window.chat_view.race_action(1)
    assert again.text() == "Replay the race with plain decoding" and again.isEnabled()
    again.trigger()
    assert len(host.races) == 1  # replayed from the record


def test_a_race_drafts_from_the_files_the_conversation_had_up_to_its_reply(
    qtbot, settings, store, tmp_path: Path
) -> None:
    window, host = window_with(qtbot, settings, store)
    notes = tmp_path / "notes.md"
    notes.write_text("the notes' text")
    window.files.attach_paths([str(notes)])
    stream_reply(window, host)
    window.chat_view.race_action(1).trigger()
    (request,) = host.races
    assert [(s.name, s.text, s.kind) for s in request.sources] == [("notes.md", "the notes' text", "attachment")]
    assert "the notes' text" in request.history[-1]["content"]  # in the prompt too, as the reply read it


def test_a_running_race_shows_its_progress_and_cancel_stores_nothing(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    stream_reply(window, host)
    before = store.messages(window.conversation_id)[-1].stats
    window.racing.race_last()
    (request,) = host.races
    dialog = window.racing.progress
    assert dialog is not None and dialog.isVisible() and dialog.bar.maximum() == 8  # both runs' 4 tokens
    assert dialog.stage.text().startswith("Starting")
    host.worker.race_progress.emit(request, RaceProgress(2, 2, PLAIN_RUN, 4, 1, 4, 0.5, 0.25))
    assert dialog.stage.text() == "Block 2 of 2: plain decoding" and dialog.bar.value() == 5
    assert dialog.runs.text() == ("Speculative 4/4 tokens (8.0 tokens/s) \u00b7 plain 1/4 tokens (4.0 tokens/s)")
    errors: list[str] = []
    window.error_shown.connect(errors.append)
    dialog.cancel_button.click()
    assert host.tokens[-1].cancelled and not dialog.cancel_button.isEnabled() and dialog.stage.text() == "Cancelling…"
    with qtbot.waitSignal(window.races.cancelled):
        host.worker.race_failed.emit(request, "the race was stopped")
    assert window.racing.progress is None and window.racing.panel is None and not window.races.running
    assert errors == []  # cancelling is no error
    assert store.messages(window.conversation_id)[-1].stats == before and "race" not in before
    assert [m.content for m in store.messages(window.conversation_id)] == ["hi", "Hello world"]
    figures = window.transcript.messages[-1].figures
    assert figures is not None and figures.race is None and window.menu_actions.race.isEnabled()


def test_race_again_runs_a_stored_race_anew_and_replaces_it(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    stream_reply(window, host)
    window.racing.race_last()
    drifted = race_record(
        "Hello world",
        [(0.1, 1, 3), (0.2, 1, 2), (0.3, 1, 4), (0.4, 1, 2)],
        drift="The machine's speed changed: plain decoding ran at 10.0 tokens/s ...",
    )
    with qtbot.waitSignal(window.races.ready):
        host.worker.raced.emit(host.races[0], drifted)
    panel = window.racing.panel
    assert panel is not None and panel.drift.isVisibleTo(panel) and panel.drift.text() == drifted.drift
    panel.race_again.click()
    assert len(host.races) == 2 and window.racing.progress is not None  # not replayed: run anew
    steady = race_record("Hello world", [(0.1, 1, 3), (0.2, 1, 2), (0.3, 1, 4), (0.4, 1, 2)])
    with qtbot.waitSignal(window.races.ready):
        host.worker.raced.emit(host.races[1], steady)
    assert RaceRecord.from_dict(store.messages(window.conversation_id)[-1].stats["race"]) == steady
    assert window.racing.panel is not None and window.racing.panel.drift.isHidden()


def test_a_failed_race_says_so_in_one_line(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    stream_reply(window, host)
    window.racing.race_last()
    with qtbot.waitSignal(window.error_shown) as shown:
        host.worker.race_failed.emit(host.races[0], "the race was stopped")
    assert shown.args == ["the race was stopped"] and not window.races.running and window.racing.panel is None


def test_races_are_off_for_sampled_replies_while_streaming_and_without_a_pair(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    window.controls.temperature.setValue(0.7)
    stream_reply(window, host)
    action = window.chat_view.race_action(1)
    assert not action.isEnabled()
    assert action.toolTip() == "races compare greedy replies (temperature 0); this one was sampled at T=0.7"
    assert not window.menu_actions.race.isEnabled() and window.menu_actions.race.toolTip() == action.toolTip()
    window.racing.race(1)
    assert host.races == [] and window.last_error.startswith("races compare greedy replies")

    window.controls.temperature.setValue(0.0)
    stream_reply(window, host, finish=False)
    for index in (1, 3):  # the earlier reply and the streaming one
        streaming = window.chat_view.race_action(index)
        assert not streaming.isEnabled() and streaming.toolTip() == "wait for the reply to finish"
    assert not window.menu_actions.race.isEnabled()
    host.worker.events.emit([Finished(FinishReason.EOS, GenerationStats(generated=4, generate_seconds=0.35))])
    assert window.chat_view.race_action(3).isEnabled() and window.menu_actions.race.isEnabled()

    window.host.worker.load_failed.emit("gone")  # no pair loaded now: nothing to race on
    race = window.menu_actions.race
    assert not race.isEnabled() and race.toolTip() == "load the pair to race plain decoding"


# -- the real thing on the demo pair -----------------------------------------------------

LOAD_TIMEOUT = 120_000
RACE_TIMEOUT = 300_000


def point_of(view: ChatView, text: str) -> QPoint:
    at = view.document().find(text)
    assert not at.isNull(), text
    cursor = QTextCursor(view.document())
    cursor.setPosition(at.selectionStart() + 1)
    return view.cursorRect(cursor).center()


@pytest.mark.slow
def test_a_real_race_matches_the_reply_and_replays_after_a_restart(qtbot, settings, demo_pair, tmp_path: Path) -> None:
    settings.max_tokens = 24
    settings.depth = 4
    path = tmp_path / "conversations.sqlite3"
    store = ConversationStore(path)
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    window.show()  # laid out: a right-click finds the reply under the pointer
    qtbot.waitExposed(window)
    with qtbot.waitSignal(window.models_loaded, timeout=LOAD_TIMEOUT):
        window.load_models(demo_pair.target, demo_pair.draft)
    with qtbot.waitSignal(window.reply_finished, timeout=RACE_TIMEOUT):
        window.send("List the days of the week, one per line.")
    reply = window.transcript.messages[-1]
    assert reply.figures is not None and reply.figures.timeline
    menu = window.chat_view.context_menu(point_of(window.chat_view, "Assistant"))  # the right-click on the reply
    qtbot.addWidget(menu)
    race = next(a for a in menu.actions() if a.text() == "Race plain decoding")
    assert race.isEnabled()
    told: list[RaceProgress] = []
    window.races.progressed.connect(told.append)
    worker = window.host.worker
    gate = threading.Event()  # the runtime's thread runs a call from elsewhere: Cancel comes before the race starts
    holder = threading.Thread(target=worker.call, args=(gate.wait, CancelToken()))
    holder.start()
    qtbot.waitUntil(lambda: worker.serving, timeout=RACE_TIMEOUT)
    try:
        race.trigger()
        dialog = window.racing.progress
        assert dialog is not None and dialog.isVisible() and dialog.bar.maximum() == 2 * reply.figures.generated
        dialog.cancel_button.click()
    finally:
        with qtbot.waitSignal(window.races.cancelled, timeout=RACE_TIMEOUT):
            gate.set()
        holder.join()
    assert window.racing.progress is None and window.racing.panel is None and told == []
    cid = window.conversation_id
    assert cid is not None
    stats = store.messages(cid)[-1].stats
    assert stats is not None and "race" not in stats  # nothing stored
    assert [m.content for m in window.transcript.messages][-1] == reply.content

    with qtbot.waitSignal(window.races.ready, timeout=RACE_TIMEOUT) as ready:
        race.trigger()
    record = ready.args[1]
    assert told and told[-1].spec_tokens == told[-1].plain_tokens == reply.figures.generated  # progress came
    assert window.racing.progress is None  # closed once the race ended
    assert record.plain.text == record.spec.text == reply.content and record.fork is None  # greedy: the same text
    assert record.plain.tokens == record.spec.tokens == reply.figures.generated
    assert reply.figures.drafting is not None
    assert (record.drafter, record.depth) == (reply.figures.drafting["drafter"], 4)  # drafted as the reply did
    panel = window.racing.panel
    assert panel is not None and panel.identity.text().startswith("Identical text")
    assert [m.content for m in window.transcript.messages] == [
        "List the days of the week, one per line.",
        reply.content,
    ]
    stats = store.messages(window.conversation_id)[-1].stats
    assert stats["timeline"] and RaceRecord.from_dict(stats["race"]) == record
    window.close()
    store.close()

    reopened_store = ConversationStore(path)
    host = FakeHost()  # no model: a replay must not need the runtime
    again = MainWindow(settings, reopened_store, host=host)
    qtbot.addWidget(again)
    again.show()
    qtbot.waitExposed(again)
    assert [m.content for m in again.transcript.messages][-1] == reply.content
    menu = again.chat_view.context_menu(point_of(again.chat_view, "Assistant"))
    qtbot.addWidget(menu)
    replay = next(a for a in menu.actions() if a.text() == "Replay the race with plain decoding")
    assert replay.isEnabled() and again.menu_actions.race.isEnabled()
    replay.trigger()
    panel = again.racing.panel
    assert panel is not None and panel.record == record
    with qtbot.waitSignal(panel.replay.finished, timeout=60_000):
        pass
    assert panel.spec.shown_text == reply.content and panel.plain.shown_text == record.plain.text
    assert host.races == [] and host.requests == [] and host.loads == []  # no runtime call
    again.close()
    reopened_store.close()


def test_verified_events_carry_no_time_by_default() -> None:
    assert verified(0, ("a",), (), "b").elapsed == 0.0
    assert Verified(0, 0, (), (), 1, (), (), "b", (), ()) == dataclasses.replace(
        Verified(0, 0, (), (), 1, (), (), "b", (), ()), elapsed=1.0
    )  # a time never makes two verdicts differ
