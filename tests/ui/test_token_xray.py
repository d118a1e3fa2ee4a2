"""The token X-ray: clicking a token opens its detail panel, in both views, live and after a restart."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtGui import QHelpEvent, QTextCursor, QTextFragment
from PySide6.QtWidgets import QApplication, QToolTip

from specchat.core.chat.store import ConversationStore
from specchat.core.chat.transcript import ReplyFigures
from specchat.core.types import DrafterKind, Finished, FinishReason, GenerationStats, Verified
from specchat.ui.chat_view import ChatView
from specchat.ui.main_window import MainWindow
from specchat.ui.token_styles import PROP_POSITION, PROP_ROUND
from specchat.ui.token_xray import TokenXray, readable
from support.views import char_point, stream, streaming_view
from support.xray import xray_round

BOTH = pytest.mark.parametrize("verdicts", [False, True], ids=["reading", "verdicts"])


def _fragments(view: ChatView) -> list[QTextFragment]:
    out = []
    block = view.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            out.append(it.fragment())
            it += 1
        block = block.next()
    return out


def _point_of_token(view: ChatView, round_: int, position: int) -> QPoint:
    """The viewport point over the middle of the first character of the token at (round, draft position)."""
    for frag in _fragments(view):
        fmt = frag.charFormat()
        if fmt.property(PROP_ROUND) == round_ and fmt.property(PROP_POSITION) == position:
            return char_point(view, frag.position())
    raise AssertionError(f"no token at round {round_}, position {position}")


def _click(qtbot, view: ChatView, point: QPoint) -> TokenXray:
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=point)
    qtbot.waitUntil(lambda: view.xray is not None and view.xray.isVisible())
    assert view.xray is not None
    return view.xray


def _shown_view(qtbot, events: list[Verified], verdicts: bool) -> ChatView:
    view = streaming_view(qtbot, "Say it", verdicts=verdicts)
    view.resize(600, 400)
    view.show()
    qtbot.waitExposed(view)
    stream(view, [*events, Finished(FinishReason.EOS, GenerationStats())])
    view.flush()
    return view


@BOTH
def test_clicking_an_accepted_lookup_draft_shows_its_xray(qtbot, verdicts: bool) -> None:
    view = _shown_view(qtbot, [xray_round(1, 2, correction=51)], verdicts)
    xray = _click(qtbot, view, _point_of_token(view, 3, 1))
    assert "d0" in xray.heading.text() and "accepted draft" in xray.heading.text()
    assert xray.where.text() == "round 4 · draft position 1"  # the engine's round 3, counted from 1 on screen
    assert xray.source.text() == "drafted by lookup in the conversation (match of 4 tokens)"
    assert xray.probs.text() == "q(x) = 0.800 (draft) · p(x) = 0.300 (target)"
    assert xray.verdict.text() == "argmax matched"
    assert not xray.correction.isVisible()
    tops = xray.tops.text()
    assert "target's top 2 (p)" in tops and "draft's top token (q)" in tops  # named by how many it shows
    assert "\u201ct0\u201d" in tops and "0.600" in tops and "<b>\u201cd0\u201d</b>" in tops
    qtbot.keyClick(xray, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: not xray.isVisible())


def test_a_rejected_draft_names_the_correction_and_a_later_one_was_never_judged(qtbot) -> None:
    view = _shown_view(qtbot, [xray_round(1, 2, correction=51)], verdicts=True)
    xray = _click(qtbot, view, _point_of_token(view, 3, 2))
    assert "rejected draft" in xray.heading.text()
    assert xray.source.text() == "drafted by the draft model"
    assert xray.verdict.text() == "argmax differed"
    assert xray.correction.isVisible() and "\u201ct1\u201d" in xray.correction.text()
    xray.close()
    xray = _click(qtbot, view, _point_of_token(view, 3, 3))
    assert xray.verdict.text().startswith("not judged")
    assert not xray.correction.isVisible()
    xray.close()
    xray = _click(qtbot, view, _point_of_token(view, 3, 0))  # the correction itself
    assert xray.source.text() == "the target's own token"
    assert xray.probs.text() == "p(x) = 0.600 (target)"
    assert "replaces the rejected draft" in xray.verdict.text() and "d1" in xray.verdict.text()
    assert "draft's top" not in xray.tops.text()
    xray.close()


def test_at_temperature_above_zero_it_shows_the_acceptance_probability(qtbot) -> None:
    view = _shown_view(qtbot, [xray_round(1, 1, correction=51, greedy=False)], verdicts=True)
    xray = _click(qtbot, view, _point_of_token(view, 3, 1))
    assert xray.verdict.text() == "acceptance probability min(1, p/q) = 0.375"  # 0.3 / 0.8
    xray.close()


def test_a_click_elsewhere_closes_it_and_a_click_on_plain_text_opens_nothing(qtbot) -> None:
    view = _shown_view(qtbot, [xray_round(1, 0, correction=51)], verdicts=True)
    xray = _click(qtbot, view, _point_of_token(view, 3, 1))
    # Through the window system, as a real click comes (a click sent to a widget skips the popup's handling).
    elsewhere = view.viewport().mapTo(view.window(), QPoint(5, view.viewport().height() - 5))
    qtbot.mouseClick(view.window().windowHandle(), Qt.MouseButton.LeftButton, pos=elsewhere)
    qtbot.waitUntil(lambda: not xray.isVisible())
    at = view.document().find("Say it")
    cursor = QTextCursor(view.document())
    cursor.setPosition(at.selectionStart() + 1)
    plain = view.viewport().mapTo(view.window(), view.cursorRect(cursor).center())
    qtbot.mouseClick(view.window().windowHandle(), Qt.MouseButton.LeftButton, pos=plain)
    qtbot.wait(50)  # the X-ray would open right after the click
    assert not xray.isVisible()


def test_the_window_s_shortcuts_work_while_it_is_open(qtbot) -> None:
    """A popup takes every key: Ctrl+Q with an X-ray open closed nothing and quit nothing (seen in the real
    window). The window's own shortcut now answers, and a key without a modifier still does nothing."""
    from PySide6.QtGui import QAction, QKeySequence
    from PySide6.QtWidgets import QMainWindow

    window = QMainWindow()
    qtbot.addWidget(window)
    quit_action = QAction("Quit", window)
    quit_action.setShortcut(QKeySequence("Ctrl+Q"))  # the platform's Quit (offscreen has no standard keys)
    window.addAction(quit_action)
    fired: list[bool] = []
    quit_action.triggered.connect(lambda: fired.append(True))
    view = ChatView()  # the window owns it (streaming_view's would be torn down twice)
    view.transcript.add_user("Say it")
    view.append_message()
    view.transcript.begin_reply()
    view.append_message()
    window.setCentralWidget(view)
    window.resize(600, 400)
    window.show()
    qtbot.waitExposed(window)
    stream(view, [xray_round(1, 2, correction=51), Finished(FinishReason.EOS, GenerationStats())])
    view.flush()
    xray = _click(qtbot, view, _point_of_token(view, 3, 1))
    qtbot.keyClick(xray, Qt.Key.Key_Q)
    assert xray.isVisible() and not fired
    qtbot.keyClick(xray, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not xray.isVisible())
    assert fired == [True]


def test_the_tooltip_says_who_drafted_the_token(qtbot) -> None:
    view = _shown_view(qtbot, [xray_round(2, 0, correction=52)], verdicts=True)
    tips = []
    for position in (1, 2, 0):
        point = _point_of_token(view, 3, position)
        QApplication.sendEvent(
            view.viewport(), QHelpEvent(QEvent.Type.ToolTip, point, view.viewport().mapToGlobal(point))
        )
        tips.append(QToolTip.text())
    QToolTip.hideText()
    assert "drafted by lookup in the conversation (match of 4 tokens)" in tips[0]
    assert "drafted by the draft model" in tips[1]
    assert "the target's own token" in tips[2]


def test_a_rejection_markers_tooltip_says_who_drafted_the_guess(qtbot) -> None:
    view = _shown_view(qtbot, [xray_round(1, 2, correction=51)], verdicts=False)
    marker = next(frag.charFormat() for frag in _fragments(view) if frag.text() == "\u00d7")
    assert "the draft guessed" in marker.toolTip() and "drafted by the draft model" in marker.toolTip()


def test_token_text_is_shown_readably() -> None:
    assert readable(" a\n\tb") == "\u2423a\u23ce\u21e5b"
    assert readable("") == "\u2205"


PROMPT = "List the days of the week, one per line."


@pytest.mark.slow
def test_after_a_restart_a_clicked_token_shows_the_engines_numbers(qtbot, settings, store, demo_pair) -> None:
    settings.max_tokens = 32
    settings.depth = 4
    settings.drafter = DrafterKind.DRAFT_MODEL  # every round the model's (a 32-token reply may not pay its read)
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.models_loaded, timeout=120_000):
        window.load_models(demo_pair.target, demo_pair.draft)
    seen: list[Verified] = []
    window.chat.events_folded.connect(lambda batch: seen.extend(e for e in batch if isinstance(e, Verified)))
    with qtbot.waitSignal(window.reply_finished, timeout=300_000):
        window.send(PROMPT)
    window.close()
    store.close()
    event = next(v for v in seen if v.accepted and v.accepted_pieces[0].strip())
    rejected = next((v for v in seen if v.rejected), None)

    reopened = ConversationStore()  # the same file, from the app's data folder
    second = MainWindow(settings, reopened)
    qtbot.addWidget(second)
    second.resize(1000, 700)
    second.show()
    qtbot.waitExposed(second)
    view = second.chat_view
    view.set_show_verdicts(True)
    xray = _click(qtbot, view, _point_of_token(view, event.round, 1))
    # counted from 1, of the reply's target passes: the same rounds as the panel's "Rounds" row and chart
    passes = len(seen)
    assert xray.where.text() == f"round {event.round + 1} of {passes} · draft position 1"
    stored = second.transcript.messages[-1].figures
    assert stored is not None
    second.stats.show_stored(stored)
    assert second.stats.round_count.text().split()[0] == str(passes)
    assert xray.source.text() == "drafted by the draft model"
    assert xray.probs.text() == (
        f"q(x) = {event.draft_probs[0]:.3f} (draft) · p(x) = {event.target_probs[0]:.3f} (target)"
    )
    assert xray.verdict.text() == "argmax matched"
    best, p_best = event.target_top[0][0][2], event.target_top[0][0][1]
    assert readable(best) in xray.tops.text().replace("&amp;", "&") and f"{p_best:.3f}" in xray.tops.text()
    xray.close()
    if rejected is not None:
        judged = len(rejected.sources) - len(rejected.rejected)
        xray = _click(qtbot, view, _point_of_token(view, rejected.round, judged + 1))
        assert xray.verdict.text() == "argmax differed"
        assert rejected.correction is not None
        chosen = {t: text for t, _, text in rejected.target_top[judged]}[rejected.correction]
        assert readable(chosen) in xray.correction.text().replace("&amp;", "&")
        xray.close()
    second.close()
    reopened.close()


def test_the_stats_panel_draws_the_conversations_curve_and_acceptance_per_source(qtbot) -> None:
    from specchat.core.chat.transcript import Transcript
    from specchat.ui.stats_panel import StatsPanel

    panel = StatsPanel()
    qtbot.addWidget(panel)
    transcript = Transcript()
    transcript.add_user("one")
    transcript.begin_reply()
    for event in (xray_round(2, 1, correction=52), xray_round(1, 2, correction=51)):
        transcript.fold(event)
    transcript.fold(Finished(FinishReason.EOS, GenerationStats()))
    transcript.add_user("two")
    live = transcript.begin_reply()
    transcript.fold(xray_round(3, 0, correction=53))
    panel.set_transcript(transcript)
    assert live.figures is not None
    panel.follow(live.figures)
    # Position 1 accepted in all 3 rounds; 2 reached 3 times, accepted twice; 3 reached twice, accepted once.
    assert panel.curve == [(1.0, 3), (2 / 3, 3), (0.5, 2)]
    points = panel.curve_series.points()
    assert [p.x() for p in points] == [1, 2, 3] and [p.y() for p in points] == pytest.approx([100.0, 200 / 3, 50.0])
    assert "position 2: 67% of 3" in panel.curve_view.toolTip()
    # This reply: lookup drafted 1 token (accepted), the draft model 2 (accepted).
    assert not panel.by_source.isHidden() and panel.by_source.text() == "lookup 100% of 1 · draft model 100% of 2"
    panel.show_stored(transcript.messages[1].figures or ReplyFigures())
    assert panel.by_source.text() == "lookup 100% of 2 · draft model 25% of 4"
    one_source = ReplyFigures()
    one_source.by_source = {"model": [4, 3]}
    one_source.generated = 5
    panel.show_stored(one_source)
    assert panel.by_source.isHidden()
