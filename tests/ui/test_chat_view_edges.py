"""Rough edges of the chat view a new user hit: kept line breaks, a restart opening at the end, a version arrow
opening no stray X-ray, Copy saying "Copied", the About details' size, the round chart's axes and round numbers."""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMessageBox, QTextEdit

from specchat.core.chat.store import ConversationStore, ReplyWriter
from specchat.core.chat.transcript import Message, ReplyFigures, Transcript
from specchat.core.types import Finished, FinishReason, GenerationStats
from specchat.ui.chat_view import ChatView
from specchat.ui.code_marks import PROP_CODE_MARK, code_mark_count
from specchat.ui.copy_feedback import COPIED_LABEL, COPY_LABEL, find_link
from specchat.ui.main_window import MainWindow
from specchat.ui.stats_panel import StatsPanel, rounds_text, whole_ticks
from specchat.ui.token_styles import REJECTION_MARKER
from specchat.ui.token_xray import where
from specchat.ui.window_dialogs import DETAILS_SIZE
from support.events import verified
from support.fake_host import FakeHost
from support.views import char_point, stream, streaming_view
from support.xray import xray_round

POEM = "Roses are red,\nViolets are blue,\nSugar is sweet.\n\n```\nfirst = 1\nsecond = 2\n```\nThe end."


def shown(qtbot, transcript: Transcript, width: int = 600, height: int = 400) -> ChatView:
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(width, height)
    view.show()
    qtbot.waitExposed(view)
    view.show_transcript(transcript)
    return view


def block_texts(view: ChatView) -> list[str]:
    out, block = [], view.document().begin()
    while block.isValid():
        out.append(block.text())
        block = block.next()
    return out


def test_single_line_breaks_are_kept_and_code_is_unchanged(qtbot) -> None:
    view = shown(qtbot, Transcript([Message("user", "A poem?"), Message("assistant", POEM, finish_reason="eos")]))
    texts = block_texts(view)
    # one paragraph, its lines kept (Qt's line separator inside the block), not run together
    assert "Roses are red,\u2028Violets are blue,\u2028Sugar is sweet." in texts
    assert not any("red, Violets" in t for t in texts)
    assert "first = 1" in texts and "second = 2" in texts  # code lines as before, a block each
    assert "The end." in texts
    view.selectAll()
    view.copy_selection()
    assert "Roses are red,\nViolets are blue,\nSugar is sweet." in QGuiApplication.clipboard().text()


def long_conversation(store: ConversationStore) -> int:
    cid = store.create_conversation("Long")
    text = ("A fairly long paragraph of reply text that wraps across lines. " * 8 + "\n\n```python\nx = 1\n```\n\n") * 3
    for i in range(12):
        store.add_message(cid, "user", f"question {i}\n\nwith more text " * 3)
        writer = ReplyWriter(store, cid)
        writer.feed(verified(0, (text[:-1],), (), text[-1]))
        writer.feed(Finished(FinishReason.EOS, GenerationStats(rounds=1, drafted=1, accepted=1, generated=2)))
    return cid


def test_after_a_restart_the_last_conversation_opens_at_its_end(qtbot, settings, store) -> None:
    settings.last_conversation = long_conversation(store)
    first = MainWindow(settings, store, host=FakeHost().as_host())
    qtbot.addWidget(first)
    first.show()
    first.resize(1300, 850)
    qtbot.waitExposed(first)
    first.close()  # keeps its geometry, restored on the next start
    assert settings.window_geometry

    again = MainWindow(settings, store, host=FakeHost().as_host())
    qtbot.addWidget(again)
    again.show()  # shown at its restored size, as at start
    qtbot.waitExposed(again)
    view = again.chat_view
    bar = view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0)
    assert bar.value() == bar.maximum()
    assert view.following and not view.jump_button.isVisible()


def _xray_reply(transcript: Transcript, rounds: int) -> Message:
    reply = transcript.begin_reply()
    for n in range(rounds):
        words = dataclasses.replace(
            xray_round(3, 0, number=n), accepted_pieces=("alpha ", "beta ", "gamma "), correction_piece="delta "
        )
        transcript.fold(words)
    transcript.fold(Finished(FinishReason.EOS, GenerationStats()))
    return reply


def _link_point(view: ChatView, href: str) -> QPoint:
    block = view.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            if frag.charFormat().anchorHref() == href:
                return char_point(view, frag.position())
            it += 1
        block = block.next()
    raise AssertionError(f"no link to {href}")


def test_clicking_a_version_arrow_opens_no_xray_for_what_is_drawn_there_next(qtbot) -> None:
    versions = Transcript()
    versions.add_user("Say it")
    reply = _xray_reply(versions, 2)
    reply.version = reply.versions = 2
    view = shown(qtbot, versions)
    # the other version: a page whose tokens sit where the arrow was (the window redraws it on the click)
    other = Transcript()
    _xray_reply(other, 14)
    flipped: list[tuple[int, int]] = []

    def flip(index: int, step: int) -> None:
        flipped.append((index, step))
        view.show_transcript(other)

    view.version_requested.connect(flip)
    arrow = _link_point(view, "specchat:version/1/-1")
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=arrow)
    qtbot.wait(50)
    assert flipped == [(1, -1)]
    assert view.token_at(arrow) is not None  # a token with an X-ray is under the mouse now...
    assert view.xray is None or not view.xray.isVisible()  # ...but it was not what was clicked
    # a click on a token still opens its X-ray
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=arrow)
    qtbot.waitUntil(lambda: view.xray is not None and view.xray.isVisible())
    assert view.xray is not None
    view.xray.close()


def test_a_code_blocks_copy_says_copied_for_a_moment(qtbot) -> None:
    view = shown(qtbot, Transcript([Message("user", "Code?"), Message("assistant", POEM, finish_reason="eos")]))
    href = f"specchat:copy/1/{POEM.index('```')}"
    QGuiApplication.clipboard().setText("")
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=_link_point(view, href))
    assert QGuiApplication.clipboard().text() == "first = 1\nsecond = 2"
    assert find_link(view.document(), href, COPIED_LABEL) is not None
    assert find_link(view.document(), href, COPY_LABEL) is None
    assert view.xray is None  # the link is not a token
    qtbot.waitUntil(lambda: find_link(view.document(), href, COPY_LABEL) is not None, timeout=5000)
    assert find_link(view.document(), href, COPIED_LABEL) is None


def test_the_about_details_are_roomy(qtbot, settings, store) -> None:
    window = MainWindow(settings, store, host=FakeHost().as_host())
    qtbot.addWidget(window)
    box = window.dialogs.about()
    details_button = next(b for b in box.buttons() if box.buttonRole(b) == QMessageBox.ButtonRole.ActionRole)
    details_button.click()
    details = box.findChild(QTextEdit)
    assert details is not None
    qtbot.waitUntil(details.isVisible)
    assert details.width() >= DETAILS_SIZE[0] and details.height() >= DETAILS_SIZE[1]
    assert details.lineWrapMode() == QTextEdit.LineWrapMode.NoWrap
    box.close()


def test_the_round_chart_ends_with_the_data_and_ticks_whole_numbers(qtbot) -> None:
    panel = StatsPanel()
    qtbot.addWidget(panel)
    figures = ReplyFigures(passes=5, rounds=5, generated=17, depth=4)
    figures.per_round = [(0, 4, 3), (1, 4, 4), (2, 4, 1), (3, 4, 0), (4, 4, 2)]
    panel.show_stored(figures)
    x, y = panel.x_axis, panel.y_axis
    assert (x.min(), x.max(), x.tickCount()) == (1, 5, 5)  # rounds 1 to 5, the engine's 0 to 4
    assert (y.min(), y.max(), y.tickCount()) == (0, 4, 5)  # 0, 1, 2, 3, 4
    assert x.labelFormat() == y.labelFormat() == "%.0f"
    assert [p.x() for p in panel.accepted_series.points()] == [1, 2, 3, 4, 5]
    assert panel.round_count.text() == "5"
    # longer replies: evenly spaced whole ticks, the axis ending on one at most a step past the data
    assert whole_ticks(1, 33) == (33, 8)  # 1, 9, 17, 25, 33
    assert whole_ticks(1, 27) == (27, 13)  # 1, 14, 27
    assert whole_ticks(0, 7) == (8, 2)  # no whole step ends on 7 with 3 to 6 ticks
    assert whole_ticks(0, 4) == (4, 1)
    assert whole_ticks(1, 1) == (2, 1)
    panel.reset()  # no reply: an empty chart with axes still
    assert (x.min(), x.max()) == (0, 4)


def test_rounds_are_numbered_alike_in_the_xray_and_the_panel() -> None:
    transcript = Transcript()
    for n in range(32):
        transcript.begin_reply() if n == 0 else None
        transcript.fold(xray_round(1, 0, number=n) if n % 2 else verified(n, (), (), "x"))
    reply = transcript.messages[-1]
    assert reply.figures is not None and reply.spans
    last = reply.spans[-1]
    assert last.detail is not None
    assert where(last, last.detail, reply.figures.passes) == "round 32 of 32 · the target's token after the drafts"
    assert rounds_text(reply.figures) == "32 (16 drafted)"


def test_rejections_inside_inline_code_leave_its_text_alone(qtbot) -> None:
    view = streaming_view(qtbot, "Reverse a list?")
    stream(
        view,
        [
            verified(0, ("Use", " `a["), ("0",), ":"),  # the draft guessed "0" inside the code
            verified(1, (":-1]`", " here"), ("!",), "."),  # and "!" after the prose
            Finished(FinishReason.EOS, GenerationStats()),
        ],
    )
    view.flush()
    text = view.toPlainText()
    assert "Use a[::-1] here" + REJECTION_MARKER + "." in text  # prose keeps its ×, the code none
    at = view.document().find("::-1")
    cursor = view.textCursor()
    cursor.setPosition(at.selectionStart() + 1)  # the format of the first ":"
    mark = cursor.charFormat()
    assert mark.property(PROP_CODE_MARK) and "0" in mark.toolTip()
    assert code_mark_count(view.textCursor()) == 1
