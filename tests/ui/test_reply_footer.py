"""The figures line under each reply: stored replies after a restart, a reply as it finishes, a reply that waited
for a served request, and a real reply on the demo pair."""

from __future__ import annotations

import dataclasses
import re

import pytest

import specchat.core.chat.transcript as transcript_module
from specchat.core.chat.store import ConversationStore, ReplyWriter
from specchat.core.chat.transcript import ReplyFigures
from specchat.core.types import Finished, FinishReason, GenerationStats
from specchat.ui.main_window import MainWindow
from specchat.ui.reply_footer import footer_line, footer_text
from specchat.ui.status_progress import WAITING_FOR_SERVER
from support.events import verified
from support.fake_host import FakeHost, window_with

ROUNDS = 10  # each commits 4 tokens: 3 accepted drafts and the target's own
STATS = GenerationStats(
    rounds=ROUNDS,
    drafted=3 * ROUNDS,
    accepted=3 * ROUNDS,
    generated=4 * ROUNDS,
    generate_seconds=1.0,
    plain_tokens_per_second=25.0,
    plain_tokens=32,
)
EXPECTED = "40.0 tok/s · 40 tokens · first token 0.31 s · ×1.60"


def rounds() -> list[object]:
    return [verified(n, ("a", "b", "c"), (), "d ") for n in range(ROUNDS)]


def stored_reply(store: ConversationStore, first_token: float = 0.31, waited: float = 0.0) -> int:
    cid = store.create_conversation("Figures")
    store.add_message(cid, "user", "Say something")
    figures = ReplyFigures()
    writer = ReplyWriter(store, cid, figures=figures)
    for event in rounds():
        figures.fold([event])
        writer.feed(event)
    figures.first_token_seconds, figures.waited_seconds = first_token, waited
    finished = Finished(FinishReason.EOS, STATS)
    figures.fold([finished])
    writer.feed(finished)
    return cid


def test_the_line_says_rate_tokens_first_token_and_the_measured_speedup() -> None:
    figures = ReplyFigures(generated=40, passes=ROUNDS, first_token_seconds=0.31, final=STATS)
    text, tip = footer_text(figures)
    assert text == EXPECTED
    assert "25.0" in tip  # the plain decoding figure the ratio is over
    # no probe after the reply: no ratio, the rest stays
    no_probe = dataclasses.replace(STATS, plain_tokens_per_second=0.0, plain_tokens=0)
    assert footer_text(dataclasses.replace(figures, final=no_probe))[0] == EXPECTED.removesuffix(" · ×1.60")
    # a ratio beyond what its rounds allow (×40 from 4 tokens a pass) says the machine changed: left out
    slow_probe = dataclasses.replace(STATS, plain_tokens_per_second=1.0)
    assert footer_text(dataclasses.replace(figures, final=slow_probe))[0] == EXPECTED.removesuffix(" · ×1.60")
    # the engine's figures never came (cut short by a closed window): no line at all
    assert footer_text(ReplyFigures(generated=12, passes=3)) == ("", "")
    assert footer_text(None) == ("", "")
    one = ReplyFigures(generated=1, passes=1, final=GenerationStats(generated=1, generate_seconds=0.5))
    assert footer_text(one)[0] == "2.0 tok/s · 1 token"  # no ratio under MIN_TOKENS_FOR_RATIO tokens


def test_stored_replies_show_their_line_after_a_restart(qtbot, settings, store) -> None:
    cid = stored_reply(store)
    settings.last_conversation = cid
    window, _ = window_with(qtbot, settings, store, loaded=False)
    view = window.chat_view
    assert footer_line(view.textCursor(), 1) == EXPECTED
    assert footer_line(view.textCursor(), 0) == ""  # the user's message has none
    # the line is the view's own: a copy of the whole page leaves it out
    view.selectAll()
    view.copy_selection()
    from PySide6.QtGui import QGuiApplication

    copied = QGuiApplication.clipboard().text()
    assert "tok/s" not in copied and "a b" not in copied and "abcd" in copied.replace(" ", "")
    # both looks draw it
    view.set_show_verdicts(True)
    assert footer_line(view.textCursor(), 1) == EXPECTED
    assert window.stats.first_token.text() == "0.31 s"


def test_the_line_appears_as_a_reply_finishes(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    window.send("Say something")
    view = window.chat_view
    host.worker.events.emit(rounds())
    view.flush()
    assert footer_line(view.textCursor(), 1) == ""  # not while it streams
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([Finished(FinishReason.EOS, STATS)])
    line = footer_line(view.textCursor(), 1)
    assert re.fullmatch(r"40\.0 tok/s · 40 tokens( · first token \d+\.\d\d s)? · ×1\.60", line), line
    # the next message goes below it; the line stays with its reply
    window.send("And more")
    assert footer_line(view.textCursor(), 1) == line
    assert view.toPlainText().index(line) < view.toPlainText().index("And more")


def test_a_reply_that_waited_for_a_served_request_says_so(qtbot, settings, store, monkeypatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(f"{transcript_module.__name__}.time.monotonic", lambda: clock[0])
    window, host = window_with(qtbot, settings, store)
    window.send("Say something")
    reply = window.transcript.messages[-1].figures
    assert reply is not None
    reply.started = clock[0]  # asked for now, on the test's clock
    host.worker.waiting.emit(True)  # a served request holds the runtime
    assert window.statusBar().currentMessage() == WAITING_FOR_SERVER
    clock[0] += 15.0
    host.worker.waiting.emit(False)  # the reply decodes now
    clock[0] += 0.4
    host.worker.events.emit(rounds())
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([Finished(FinishReason.EOS, STATS)])
    figures = window.transcript.messages[-1].figures
    assert figures is not None
    assert figures.first_token_seconds == pytest.approx(0.4) and figures.waited_seconds == pytest.approx(15.0)
    assert window.stats.first_token.text() == "0.40 s after waiting 15.0 s"
    expected = "40.0 tok/s · 40 tokens · first token 0.40 s after waiting 15.0 s · ×1.60"
    assert footer_line(window.chat_view.textCursor(), 1) == expected
    # stored so: the same after a restart
    cid = window.conversation_id
    window.close()
    settings.last_conversation = cid
    again = MainWindow(settings, store, host=FakeHost().as_host())
    qtbot.addWidget(again)
    assert footer_line(again.chat_view.textCursor(), 1) == expected


def test_a_reply_that_did_not_wait_counts_from_its_request(monkeypatch) -> None:
    clock = [10.0]
    monkeypatch.setattr(f"{transcript_module.__name__}.time.monotonic", lambda: clock[0])
    figures = ReplyFigures(started=clock[0])
    clock[0] += 0.25
    figures.fold([verified(0, ("a",), (), "b")])
    assert figures.first_token_seconds == pytest.approx(0.25) and figures.waited_seconds == 0.0
    assert "waited_seconds" not in figures.as_dict()
    figures.decoding_began()  # told late (after the first round): changes nothing
    assert figures.waited_seconds == 0.0
    problems: list[str] = []
    bad = ReplyFigures.from_dict({"waited_seconds": "long", "generated": 3}, problems)
    assert bad.waited_seconds == 0.0 and problems == ["waited_seconds"]


@pytest.mark.slow
def test_a_real_reply_on_the_demo_pair_gets_its_line(qtbot, settings, store, demo_pair) -> None:
    settings.max_tokens = 24
    settings.depth = 4
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.models_loaded, timeout=120_000):
        window.load_models(demo_pair.target, demo_pair.draft)
    with qtbot.waitSignal(window.reply_finished, timeout=300_000):
        window.send("List the days of the week, one per line.")
    figures = window.transcript.messages[-1].figures
    assert figures is not None and figures.final is not None
    line = footer_line(window.chat_view.textCursor(), 1)
    tps = round(figures.final.tokens_per_second, 2)
    assert line.startswith(f"{tps:.1f} tok/s · {figures.generated} tokens · first token "), line
    assert line == footer_text(figures)[0]
    assert window.stats.tokens_per_second.text() == f"{tps:.1f}"  # the panel and the line agree


def test_a_reply_that_cannot_join_the_served_batch_says_why_it_waits(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    window.send("Say something")
    host.worker.waiting_because.emit("the composite drafter does not join their batch (ngram or none does)")
    host.worker.waiting.emit(True)
    assert window.statusBar().currentMessage() == (
        "Waiting for the served requests to finish: the composite drafter does not join their batch "
        "(ngram or none does)…"
    )
    host.worker.waiting.emit(False)
    host.worker.waiting.emit(True)  # a later wait with no reason given: the plain line, not the old reason
    assert window.statusBar().currentMessage() == WAITING_FOR_SERVER
