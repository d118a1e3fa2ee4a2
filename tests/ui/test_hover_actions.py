"""The system-prompt indicator and the hover toolbar over messages, on the real window with a fake host."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QGuiApplication, QMouseEvent
from PySide6.QtWidgets import QApplication

from specchat.core.types import Finished, FinishReason, GenerationStats
from specchat.ui.chat_view import ChatView
from specchat.ui.system_prompt import SystemPromptDialog
from support.events import verified
from support.fake_host import window_with
from support.views import char_point


def hover(view: ChatView, text: str) -> None:
    """Move the mouse (no button held) over the first character of ``text`` in the view."""
    at = view.document().find(text).selectionStart()
    point = QPointF(char_point(view, at))
    move = QMouseEvent(
        QEvent.Type.MouseMove,
        point,
        view.viewport().mapToGlobal(point),
        Qt.MouseButton.NoButton,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(view.viewport(), move)


def test_system_prompt_indicator_shows_updates_follows_conversations_and_opens_the_dialog(
    qtbot, settings, store
) -> None:
    window, _ = window_with(qtbot, settings, store)
    window.show()
    qtbot.waitExposed(window)
    chip = window.page.system_prompt_chip
    assert chip.isHidden()  # a new conversation has no system prompt
    dialog = window.dialogs.system_prompt()
    dialog.editor.setPlainText("Answer in one sentence.")
    dialog.accept()
    assert not chip.isHidden() and chip.text() == "System prompt: Answer in one sentence."
    with_prompt = window.conversation_id
    dialog = window.dialogs.system_prompt()
    dialog.editor.setPlainText("You are a pirate who answers every question at great length, with many digressions.")
    dialog.accept()
    assert chip.text() == "System prompt: You are a pirate who answers every question\u2026"
    plain = store.create_conversation("No prompt")
    window.chat.open_conversation(plain)
    assert chip.isHidden()
    window.chat.open_conversation(with_prompt)
    assert not chip.isHidden() and chip.text().startswith("System prompt: You are a pirate")
    qtbot.mouseClick(chip, Qt.MouseButton.LeftButton)
    opened = [d for d in window.findChildren(SystemPromptDialog) if d.isVisible()]
    assert len(opened) == 1 and opened[0].editor.toPlainText().startswith("You are a pirate")
    opened[0].reject()


def test_hovering_a_message_shows_its_actions_which_do_what_the_menu_does(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    window.show()
    qtbot.waitExposed(window)
    window.send("Name a colour")
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([verified(0, ("Crim",), (), "son"), Finished(FinishReason.EOS, GenerationStats())])
    view = window.chat_view
    bar = view.hover_bar

    hover(view, "Name a colour")
    assert bar.isVisible() and view.hover_index == 0 and set(bar.buttons) == {"copy", "edit"}

    hover(view, "Crimson")
    assert bar.isVisible() and view.hover_index == 1 and set(bar.buttons) == {"copy", "regenerate", "race"}
    found = view.document().find("Crimson")
    text_top = view.cursorRect(found).top()  # the top of the reply's first line of text
    header = char_point(view, view.document().find("Assistant").selectionStart()).y()
    assert bar.geometry().top() < header < bar.geometry().bottom() <= text_top  # over its header, not its text
    assert bar.geometry().right() < view.viewport().width()
    qtbot.mouseClick(bar.buttons["copy"], Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == "Crimson"

    asked = len(host.requests)
    qtbot.mouseClick(bar.buttons["regenerate"], Qt.MouseButton.LeftButton)
    assert len(host.requests) == asked + 1 and host.requests[-1].user_text == "Name a colour"
    assert not bar.isVisible()  # the view redrew: the bar waits for the next hover
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([verified(0, ("Tea",), (), "l"), Finished(FinishReason.EOS, GenerationStats())])

    hover(view, "Name a colour")
    with qtbot.waitSignal(view.edit_requested) as edit:
        qtbot.mouseClick(bar.buttons["edit"], Qt.MouseButton.LeftButton)
    assert edit.args == [0] and window.composer.toPlainText() == "Name a colour"

    QApplication.sendEvent(view.viewport(), QEvent(QEvent.Type.Leave))
    assert not bar.isVisible()
