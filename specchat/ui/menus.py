"""The window's menu bar: File, Conversation, View, Help, and the actions the window enables and disables.

Every keyboard shortcut of the window is one of these menu actions (Help → Keyboard shortcuts lists them from
here, and a test checks that no two share a key). Regenerate has Ctrl+R, the key a chat user reaches for
often; reloading the models, rarer and heavier (the pair is read from disk again), has Ctrl+Shift+R, as a
browser's hard reload does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu

from .chat_controller import ChatController
from .pair_loading import PairLoader
from .reply_races import ReplyRaces
from .server_panel import LocalServing
from .window_dialogs import WindowDialogs
from .window_settings import WindowLook


class MenuTarget(Protocol):
    """What the menus act on: the window's parts, and the few actions the window itself carries out."""

    chat: ChatController
    loader: PairLoader
    dialogs: WindowDialogs
    look: WindowLook
    racing: ReplyRaces
    serving: LocalServing

    def new_conversation(self) -> None: ...
    def continue_reply(self) -> None: ...
    def regenerate(self) -> None: ...
    def stop(self) -> None: ...
    def edit_last_message(self) -> None: ...
    def copy_last_reply(self) -> None: ...
    def focus_composer(self) -> None: ...
    def search_conversations(self) -> None: ...
    def show_settings(self) -> None: ...
    def toggle_pin(self) -> None: ...
    def duplicate_conversation(self) -> None: ...
    def fill_branch_menu(self, menu: QMenu) -> None: ...
    def keyboard_shortcuts(self) -> object: ...


def switch_version(chat: ChatController, step: int) -> None:
    """Flip the last reply (or the message with several versions closest to the end) to another version."""
    msgs = chat.transcript.messages
    index = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].versions > 1), None)
    if index is not None:
        chat.switch_version(index, step)


@dataclass(frozen=True)
class WindowActions:
    """The menu actions whose state follows the window (a pair loaded, a reply streaming)."""

    new: QAction
    reload: QAction
    regenerate: QAction
    stop: QAction
    edit_last: QAction
    copy_last: QAction
    pin: QAction
    duplicate: QAction
    shortcuts: QAction
    previous_version: QAction
    next_version: QAction
    continue_reply: QAction
    race: QAction
    save_preset: QAction


def build_menus(window: QMainWindow, target: MenuTarget, save_preset: Callable[[], object]) -> WindowActions:
    """Fill ``window``'s menu bar; the returned actions are enabled and disabled by the window."""
    bar = window.menuBar()
    loader, dialogs, look = target.loader, target.dialogs, target.look
    file_menu = bar.addMenu("&File")
    new = file_menu.addAction("&New conversation", QKeySequence.StandardKey.New, target.new_conversation)
    file_menu.addAction("&Choose models…", QKeySequence.StandardKey.Open, dialogs.model_picker)
    file_menu.addAction("Load the offline &demo pair", loader.load_demo)
    file_menu.addAction("&Find the best draft…", dialogs.draft_finder)
    reload = file_menu.addAction("&Reload models", QKeySequence("Ctrl+Shift+R"), loader.reload)
    reload.setToolTip("Load the same pair again with the current context size and GPU layers")
    file_menu.addAction("Remote &devices…", dialogs.remote_devices)
    file_menu.addAction(target.serving.action)
    file_menu.addSeparator()
    file_menu.addAction("Export as &Markdown…", lambda: dialogs.export("md"))
    file_menu.addAction("Export as &JSON…", lambda: dialogs.export("json"))
    file_menu.addSeparator()
    file_menu.addAction("&Quit", QKeySequence.StandardKey.Quit, window.close)

    chat_menu = bar.addMenu("&Conversation")
    chat_menu.addAction("&Search conversations", QKeySequence("Ctrl+F"), target.search_conversations)
    chat_menu.addAction("&Type a message", QKeySequence("Ctrl+L"), target.focus_composer)
    regenerate = chat_menu.addAction("&Regenerate the last reply", QKeySequence("Ctrl+R"), target.regenerate)
    stop = chat_menu.addAction("S&top the reply", QKeySequence(Qt.Key.Key_Escape), target.stop)
    stop.setToolTip("Stop the streaming reply, or leave an edit")
    edit_last = chat_menu.addAction("&Edit the last message", QKeySequence("Ctrl+Shift+E"), target.edit_last_message)
    copy_last = chat_menu.addAction("C&opy the last reply", QKeySequence("Ctrl+Shift+C"), target.copy_last_reply)
    chat_menu.addSeparator()
    pin = chat_menu.addAction("P&in this conversation", target.toggle_pin)
    duplicate = chat_menu.addAction("&Duplicate this conversation", target.duplicate_conversation)
    branch_menu = chat_menu.addMenu("&Branch into a new conversation from")
    branch_menu.aboutToShow.connect(lambda: target.fill_branch_menu(branch_menu))
    chat_menu.addSeparator()
    chat_menu.addAction("&System prompt…", dialogs.system_prompt)
    chat_menu.addAction("&Default system prompt for new conversations…", dialogs.default_system_prompt)
    saving = chat_menu.addAction("Save the sampler settings as a &preset…", save_preset)
    chat_menu.addSeparator()
    previous = chat_menu.addAction(
        "&Previous version of the last reply", QKeySequence("Alt+Left"), lambda: switch_version(target.chat, -1)
    )
    following = chat_menu.addAction(
        "&Next version of the last reply", QKeySequence("Alt+Right"), lambda: switch_version(target.chat, +1)
    )
    chat_menu.addSeparator()
    go_on = chat_menu.addAction("&Continue the last reply", target.continue_reply)
    go_on.setToolTip("Go on from where the token limit cut the last reply")
    race = chat_menu.addAction("&Race plain decoding on the last reply", target.racing.race_last)
    chat_menu.setToolTipsVisible(True)  # a disabled race says why

    view_menu = bar.addMenu("&View")
    view_menu.addAction(look.sidebar_action)
    view_menu.addAction(look.panel_action)
    view_menu.addAction(target.serving.panel.toggleViewAction())
    view_menu.addAction("&Go to the settings", QKeySequence("Ctrl+,"), target.show_settings)
    view_menu.addSeparator()
    view_menu.addAction("Zoom &in", QKeySequence.StandardKey.ZoomIn, lambda: look.set_zoom(look.settings.zoom + 1))
    view_menu.addAction("Zoom &out", QKeySequence.StandardKey.ZoomOut, lambda: look.set_zoom(look.settings.zoom - 1))
    view_menu.addAction("&Actual size", QKeySequence("Ctrl+0"), lambda: look.set_zoom(0))
    view_menu.addSeparator()
    view_menu.addAction(look.verdicts_action)
    view_menu.addAction(look.hide_rejected_action)
    view_menu.addMenu("&Theme").addActions(look.theme_actions.actions())
    help_menu = bar.addMenu("&Help")
    shortcuts = help_menu.addAction("&Keyboard shortcuts", target.keyboard_shortcuts)
    shortcuts.setShortcuts([QKeySequence("Ctrl+/"), QKeySequence("F1")])
    help_menu.addAction("&About specchat", dialogs.about)
    return WindowActions(
        new,
        reload,
        regenerate,
        stop,
        edit_last,
        copy_last,
        pin,
        duplicate,
        shortcuts,
        previous,
        following,
        go_on,
        race,
        saving,
    )
