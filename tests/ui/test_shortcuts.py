"""Keyboard shortcuts on the real window: each key triggers its action, no two actions share a key, and
Help → Keyboard shortcuts lists every one of them."""

from __future__ import annotations

from collections import Counter

import pytest
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import QApplication

from specchat.core.types import Finished, FinishReason, GenerationStats
from specchat.ui.shortcuts_dialog import ShortcutsDialog, window_shortcuts
from support.events import verified
from support.fake_host import window_with


def _shown_window(qtbot, settings, store):
    window, host = window_with(qtbot, settings, store)
    window.show()
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)
    return window, host


def _press(qtbot, widget, sequence: str) -> None:
    combination = QKeySequence(sequence)[0]  # type: ignore[index]  # PySide6's stub lacks operator[]
    qtbot.keyClick(widget, combination.key(), combination.keyboardModifiers())


def _keyed_actions(window) -> list[QAction]:
    return [a for a in window.findChildren(QAction) if a.shortcuts()]


def test_no_two_actions_share_a_key(qtbot, settings, store) -> None:
    window, _ = window_with(qtbot, settings, store)
    keys = [k.toString() for a in _keyed_actions(window) for k in a.shortcuts()]
    keys += [s.key().toString() for s in window.findChildren(QShortcut)]
    assert len(keys) > 15
    assert [k for k, n in Counter(keys).items() if n > 1] == []
    by_text = {a.text().replace("&", ""): a.shortcut().toString() for a in _keyed_actions(window)}
    assert by_text["Regenerate the last reply"] == "Ctrl+R"
    assert by_text["Reload models"] == "Ctrl+Shift+R"


@pytest.mark.parametrize("where", ["composer", "chat_view", "sidebar"])
def test_every_listed_shortcut_triggers_its_action(qtbot, settings, store, where: str) -> None:
    """Pressed where the keyboard is (the message box, the chat, the list): each key fires exactly its action."""
    cid = store.create_conversation("One")
    store.add_message(cid, "user", "hello")
    window, _ = _shown_window(qtbot, settings, store)
    window.chat.open_conversation(cid)
    widget = {"composer": window.composer, "chat_view": window.chat_view, "sidebar": window.sidebar.list}[where]
    listed = window_shortcuts(window)
    assert {s.action for s in listed} == set(_keyed_actions(window))  # nothing with a key outside the menus
    fired: list[QAction] = []
    for shortcut in listed:
        shortcut.action.triggered.disconnect()  # the key is under test here, not what the action does
        shortcut.action.setEnabled(True)
        shortcut.action.triggered.connect(lambda *_, a=shortcut.action: fired.append(a))
    for shortcut in listed:
        for key in shortcut.action.shortcuts():
            window.look.set_sidebar_visible(True)  # a toggle pressed earlier may have hidden it
            widget.setFocus()
            fired.clear()
            _press(qtbot, widget, key.toString())
            assert fired == [shortcut.action], f"{key.toString()} for {shortcut.text}"


def _answered(qtbot, window, host, question: str = "Name a colour", answer: tuple[str, str] = ("Re", "d")):
    window.send(question)
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit(
            [verified(0, (answer[0],), (), answer[1]), Finished(FinishReason.EOS, GenerationStats())]
        )


def test_the_chat_keys_do_what_they_say(qtbot, settings, store) -> None:
    window, host = _shown_window(qtbot, settings, store)
    _answered(qtbot, window, host)
    composer = window.composer
    composer.setFocus()

    _press(qtbot, composer, "Ctrl+Shift+C")
    assert QGuiApplication.clipboard().text() == "Red"

    _press(qtbot, composer, "Ctrl+R")
    assert len(host.requests) == 2  # the reply asked for again
    assert window.streaming
    _press(qtbot, composer, "Esc")
    assert host.tokens[-1].cancelled
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([Finished(FinishReason.CANCELLED, GenerationStats())])

    _press(qtbot, composer, "Ctrl+Shift+E")
    assert composer.toPlainText() == "Name a colour"  # the last message sent, back for editing
    _press(qtbot, composer, "Esc")  # and the edit left
    assert [m.content for m in window.transcript.messages][0] == "Name a colour"

    _press(qtbot, composer, "Ctrl+F")
    assert window.sidebar.search_field.hasFocus()
    _press(qtbot, window.sidebar.search_field, "Ctrl+L")
    assert composer.hasFocus()

    _press(qtbot, composer, "Ctrl+Shift+S")
    assert not window.sidebar.isVisible()
    _press(qtbot, composer, "Ctrl+F")  # searching shows the conversations again
    assert window.sidebar.isVisible() and window.sidebar.search_field.hasFocus()

    window.look.set_panel_visible(False)
    _press(qtbot, composer, "Ctrl+,")
    assert window.panel.isVisible() and window.panel.isAncestorOf(QApplication.focusWidget())


def test_the_shortcuts_dialog_lists_every_shortcut_and_opens_by_key(qtbot, settings, store) -> None:
    window, _ = _shown_window(qtbot, settings, store)
    for key in ("Ctrl+/", "F1"):
        window.activateWindow()  # back from the dialog closed last time
        qtbot.waitUntil(lambda: QApplication.activeWindow() is window)
        window.composer.setFocus()
        _press(qtbot, window.composer, key)
        qtbot.waitUntil(lambda: bool(window.findChildren(ShortcutsDialog)))
        dialog = window.findChildren(ShortcutsDialog)[0]
        assert dialog.isVisible()
        rows = dialog.rows()
        assert ("Regenerate the last reply", "Ctrl+R") in rows
        assert ("Keyboard shortcuts", "Ctrl+/, F1") in rows
        assert ("Stop the reply", "Esc") in rows
        listed = {
            (a.text().replace("&", "").removesuffix("…"), a.shortcuts()[0].toString()) for a in _keyed_actions(window)
        }
        assert {(text, keys.split(", ")[0]) for text, keys in rows} == listed
        groups = [dialog.tree.topLevelItem(i).text(0) for i in range(dialog.tree.topLevelItemCount())]
        assert groups[:3] == ["File", "Conversation", "View"] and "Help" in groups
        dialog.close()
        qtbot.waitUntil(lambda: not window.findChildren(ShortcutsDialog))
