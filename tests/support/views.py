"""A chat view set up the way the window sets it up: the transcript changes, the view draws."""

from __future__ import annotations

from PySide6.QtCore import QPoint
from PySide6.QtGui import QTextCursor
from pytestqt.qtbot import QtBot

from specchat.core.types import Event
from specchat.ui.chat_view import ChatView


def streaming_view(qtbot: QtBot, user_text: str, *, verdicts: bool = False) -> ChatView:
    """A view showing ``user_text`` and a reply that has just begun streaming."""
    view = ChatView()
    qtbot.addWidget(view)
    view.set_show_verdicts(verdicts)
    view.transcript.add_user(user_text)
    view.append_message()
    view.transcript.begin_reply()
    view.append_message()
    return view


def stream(view: ChatView, events: list[Event]) -> None:
    """What the window does with a batch: fold it into the transcript once, then queue it for drawing."""
    for event in events:
        view.transcript.fold(event)
    view.feed(events)


def char_point(view: ChatView, position: int) -> QPoint:
    """The viewport point over the middle of the character at document ``position``."""
    cursor = QTextCursor(view.document())
    cursor.setPosition(position)
    left = view.cursorRect(cursor)
    cursor.setPosition(position + 1)
    right = view.cursorRect(cursor)
    return QPoint((left.x() + right.x()) // 2, left.center().y())
