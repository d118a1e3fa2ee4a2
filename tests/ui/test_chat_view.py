"""The chat view fed with hand-built event sequences: formats, hide-rejected, tooltips, code.

Tests of the strong per-token styles run in the verdict view; those that hold in both views run in both.
(tests/ui/test_markdown_view.py covers the reading view's Markdown.)
"""

from __future__ import annotations

import pytest
from PySide6.QtGui import QFont, QTextCharFormat, QTextCursor

from specchat.core.chat.transcript import Message, TokenSpan, Transcript
from specchat.core.types import Finished, FinishReason, GenerationStats, TokenKind
from specchat.ui.chat_view import ChatView, TokenLegend
from specchat.ui.token_styles import PROP_KIND, PROP_MESSAGE, PROP_ROUND
from support.events import drafted, verified
from support.views import stream, streaming_view

BOTH = pytest.mark.parametrize("verdicts", [False, True], ids=["reading", "verdicts"])


def fragments(view: ChatView) -> list[tuple[str, str | None, QTextCharFormat]]:
    """(text, kind, format) for each text fragment of the document."""
    out: list[tuple[str, str | None, QTextCharFormat]] = []
    block = view.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            fmt = frag.charFormat()
            out.append((frag.text(), fmt.property(PROP_KIND), fmt))
            it += 1
        block = block.next()
    return out


def kinds(view: ChatView) -> dict[str, list[str]]:
    result: dict[str, list[str]] = {}
    for text, kind, _ in fragments(view):
        if kind:
            result.setdefault(kind, []).append(text)
    return result


def make_view(qtbot, verdicts: bool = False) -> ChatView:
    return streaming_view(qtbot, "Say hello", verdicts=verdicts)


def test_pending_then_verified_formats(qtbot) -> None:
    view = make_view(qtbot, verdicts=True)
    stream(view, [drafted(0, ("Hel", "lo", "!"))])
    view.flush()
    assert kinds(view) == {"pending": ["Hello!"]}
    pending_fmt = next(f for t, k, f in fragments(view) if k == "pending")
    assert pending_fmt.fontItalic()

    stream(view, [verified(0, ("Hel", "lo"), ("!",), ","), drafted(1, (" wor",)), verified(1, (" wor",), (), "ld")])
    stream(view, [Finished(FinishReason.EOS, GenerationStats())])
    view.flush()
    frags = [(t, k) for t, k, _ in fragments(view) if k]
    assert frags == [("Hello", "accepted"), ("!", "rejected"), (",", "target"), (" wor", "accepted"), ("ld", "target")]
    by_kind = {k: f for _, k, f in fragments(view) if k}
    assert by_kind["accepted"].fontUnderline() and not by_kind["accepted"].fontStrikeOut()
    assert by_kind["rejected"].fontStrikeOut()
    assert by_kind["target"].fontWeight() == QFont.Weight.Bold
    colours = {k: f.foreground().color().name() for k, f in by_kind.items()}
    assert colours["accepted"] != colours["rejected"]
    assert view.transcript.messages[-1].content == "Hello, world"
    assert not view.streaming


@BOTH
def test_timer_flushes_without_an_explicit_call(qtbot, verdicts: bool) -> None:
    view = make_view(qtbot, verdicts)
    stream(view, [drafted(0, ("a",)), verified(0, ("a",), (), "b")])
    qtbot.waitUntil(lambda: "accepted" in kinds(view))
    assert kinds(view)["target"] == ["b"]


def test_hide_rejected_rerenders_and_applies_while_streaming(qtbot) -> None:
    view = make_view(qtbot, verdicts=True)
    stream(view, [verified(0, ("ok",), ("no",), "!")])
    view.flush()
    assert kinds(view)["rejected"] == ["no"]
    view.set_hide_rejected(True)
    assert "rejected" not in kinds(view)
    stream(view, [drafted(1, ("x", "y")), verified(1, ("x",), ("y",), "z")])
    view.flush()
    assert "rejected" not in kinds(view)
    assert "".join(kinds(view)["accepted"]) == "okx"
    view.set_hide_rejected(False)
    assert kinds(view)["rejected"] == ["no", "y"]


@BOTH
def test_a_redraw_with_events_still_queued_draws_each_token_once(qtbot, verdicts: bool) -> None:
    view = make_view(qtbot, verdicts)
    stream(view, [verified(0, ("a",), ("x",), "b")])
    view.set_hide_rejected(True)  # redraws from the transcript, which already holds the queued round
    stream(view, [verified(1, ("c",), (), "d"), Finished(FinishReason.EOS, GenerationStats())])
    view.flush()
    assert "".join(t for t, k, _ in fragments(view) if k) == "abcd"
    assert not view.streaming


@BOTH
def test_pending_survives_a_rerender(qtbot, verdicts: bool) -> None:
    view = make_view(qtbot, verdicts)
    stream(view, [verified(0, ("a",), (), "b"), drafted(1, ("c", "d"))])
    view.flush()
    view.set_hide_rejected(True)
    assert kinds(view)["pending"] == ["cd"]
    stream(view, [verified(1, ("c",), ("d",), "e")])
    view.flush()
    assert "pending" not in kinds(view)
    assert view.transcript.messages[-1].content == "abce"


def test_tooltips_and_properties(qtbot) -> None:
    view = make_view(qtbot, verdicts=True)
    stream(view, [verified(3, ("Hi",), ("yo",), "!")])
    view.flush()
    by_kind = {k: f for _, k, f in fragments(view) if k}
    tip = by_kind["accepted"].toolTip()
    assert "accepted draft" in tip and "round 4" in tip and "target p=0.25" in tip and "draft p=0.75" in tip
    assert "rejected draft" in by_kind["rejected"].toolTip()
    assert "target token" in by_kind["target"].toolTip() and "draft p=n/a" in by_kind["target"].toolTip()
    assert by_kind["accepted"].property(PROP_ROUND) == 3
    assert by_kind["accepted"].property(PROP_MESSAGE) == 1


def test_code_fence_is_monospace_after_finish_in_the_verdict_view(qtbot) -> None:
    view = make_view(qtbot, verdicts=True)
    stream(view, [verified(0, ("Look:\n``", "`py\nx = 1"), (), "\n```"), verified(1, (" done",), (), ".")])
    stream(view, [Finished(FinishReason.EOS, GenerationStats())])
    view.flush()
    mono = view._mono.families()
    code = [t for t, k, f in fragments(view) if k and f.fontFamilies() == mono]
    plain = [t for t, k, f in fragments(view) if k and f.fontFamilies() != mono]
    assert "x = 1" in "".join(code)
    assert "done" in "".join(plain) and "Look:" in "".join(plain)


@BOTH
def test_show_transcript_restores_spans_and_plain_text(qtbot, verdicts: bool) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.set_show_verdicts(verdicts)
    view.show_transcript(
        Transcript(
            [
                Message("user", "hi"),
                Message(
                    "assistant",
                    "",
                    [TokenSpan(TokenKind.ACCEPTED, "he", 0, 0.9, 0.8), TokenSpan(TokenKind.TARGET, "y", 0, 0.5, None)],
                    finish_reason="eos",
                ),
            ]
        )
    )
    assert kinds(view) == {"accepted": ["he"], "target": ["y"]}
    assert "hi" in view.toPlainText()


@BOTH
def test_message_actions(qtbot, verdicts: bool) -> None:
    view = make_view(qtbot, verdicts)
    stream(view, [verified(0, ("a",), (), "b"), Finished(FinishReason.EOS, GenerationStats())])
    view.flush()
    names = [a.text() for a in view.message_actions(1)]
    assert names == ["Copy message", "Regenerate reply", "Race plain decoding"]
    with qtbot.waitSignal(view.regenerate_requested):
        view.message_actions(1)[1].trigger()
    with qtbot.waitSignal(view.edit_requested) as blocker:
        view.message_actions(0)[1].trigger()
    assert blocker.args == [0]
    view.message_actions(1)[0].trigger()
    from PySide6.QtGui import QGuiApplication

    assert QGuiApplication.clipboard().text() == "ab"


@BOTH
def test_message_index_at_a_point(qtbot, verdicts: bool) -> None:
    view = make_view(qtbot, verdicts)
    view.resize(400, 300)
    view.show()
    stream(view, [verified(0, ("a",), (), "b")])
    view.flush()
    cursor = QTextCursor(view.document())
    cursor.movePosition(QTextCursor.MoveOperation.End)
    rect = view.cursorRect(cursor)
    assert view.message_index_at(rect.center()) == 1


def test_legend_follows_the_view(qtbot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    legend = TokenLegend(view=view)
    qtbot.addWidget(legend)
    text = legend.text()  # the reading view: a tint, a marker, plain target text
    assert "background-color" in text and "\u00d7" in text and "line-through" not in text
    view.set_show_verdicts(True)
    text = legend.text()
    assert "line-through" in text and "underline" in text and "bold" in text and "italic" in text


def test_follows_a_dark_palette(qtbot) -> None:
    from PySide6.QtGui import QColor, QPalette

    view = make_view(qtbot, verdicts=True)
    stream(view, [verified(0, ("a",), ("b",), "c")])
    view.flush()
    light = {k: f.foreground().color().name() for _, k, f in fragments(view) if k}
    dark = QPalette(view.palette())
    dark.setColor(QPalette.ColorRole.Base, QColor("#1e1e1e"))
    dark.setColor(QPalette.ColorRole.Text, QColor("#e6e6e6"))
    view.setPalette(dark)
    now = {k: f.foreground().color().name() for _, k, f in fragments(view) if k}
    assert now["accepted"] != light["accepted"] and now["rejected"] != light["rejected"]
    assert now["target"] == "#e6e6e6"
    assert "".join(t for t, k, _ in fragments(view) if k) == "abc"


@BOTH
def test_hover_shows_the_token_tooltip(qtbot, verdicts: bool) -> None:
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QApplication, QToolTip

    view = make_view(qtbot, verdicts)
    view.resize(400, 300)
    view.show()
    qtbot.waitExposed(view)
    stream(view, [verified(5, ("Hello",), (), "!")])
    view.flush()
    cursor = QTextCursor(view.document())
    cursor.movePosition(QTextCursor.MoveOperation.End)
    cursor.movePosition(QTextCursor.MoveOperation.Left, n=3)  # inside "Hello"
    pos = view.cursorRect(cursor).center()
    event = QHelpEvent(QEvent.Type.ToolTip, pos, view.viewport().mapToGlobal(pos))
    QApplication.sendEvent(view.viewport(), event)
    assert "accepted draft · round 6" in QToolTip.text()  # the engine counts from 0, the screen from 1
    QToolTip.hideText()
