"""What the sidebar and the Conversation menu do to whole conversations: pin, duplicate, branch from a message."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QMenu

from specchat.core.chat.store import ConversationStore
from specchat.core.chat.titles import cut_at_word
from specchat.core.types import SpecchatError

from .chat_controller import ChatController

ROLE_NAMES = {"user": "You", "assistant": "Assistant", "system": "System"}
BRANCH_POINTS = 30  # the latest messages offered in a "Branch from" menu


class ConversationOps(QObject):
    """Pin, duplicate and branch, each a store change and then the list (and the opened copy) shown again."""

    def __init__(
        self, store: ConversationStore, chat: ChatController, notice: Callable[[str], None], parent: QObject
    ) -> None:
        super().__init__(parent)
        self.store, self.chat, self.notice = store, chat, notice

    def set_pinned(self, conversation_id: int, pinned: bool) -> None:
        try:
            self.store.set_pinned(conversation_id, pinned)
        except sqlite3.Error as exc:
            self.notice(f"the conversation could not be {'pinned' if pinned else 'unpinned'}: {exc}")
        self.chat.conversations_changed.emit()

    def is_pinned(self, conversation_id: int) -> bool:
        try:
            return self.store.conversation(conversation_id).pinned
        except (sqlite3.Error, SpecchatError):
            return False

    def duplicate(self, conversation_id: int) -> int | None:
        """Copy the conversation and open the copy; None (and one line) when it could not be copied."""
        if self.chat.streaming and conversation_id == self.chat.conversation_id:
            self.notice("wait for the reply to finish before duplicating its conversation")
            return None
        return self._open(lambda: self.store.duplicate(conversation_id), "duplicated")

    def branch(self, conversation_id: int, message_id: int) -> int | None:
        """A new conversation from the first message to ``message_id``, opened; None when it could not be made."""
        if self.chat.streaming and conversation_id == self.chat.conversation_id:
            self.notice("wait for the reply to finish before branching its conversation")
            return None
        return self._open(lambda: self.store.branch(conversation_id, message_id), "branched")

    def _open(self, make: Callable[[], int], done: str) -> int | None:
        try:
            copy = make()
        except (sqlite3.Error, SpecchatError) as exc:
            self.notice(f"the conversation could not be {done}: {exc}")
            return None
        self.chat.open_conversation(copy)  # the list is shown again with it
        return copy

    def fill_branch_menu(self, menu: QMenu, conversation_id: int | None) -> None:
        """One entry per message of the shown path (the latest :data:`BRANCH_POINTS`): "3. You: How do I…"."""
        menu.clear()
        try:
            messages = self.store.messages(conversation_id) if conversation_id is not None else []
        except sqlite3.Error as exc:
            self.notice(f"the conversation could not be read: {exc}")
            messages = []
        if not messages:
            menu.addAction("(no messages yet)").setEnabled(False)
            return
        start = max(0, len(messages) - BRANCH_POINTS)
        for number, message in enumerate(messages[start:], start + 1):
            who = ROLE_NAMES.get(message.role, message.role)
            action = menu.addAction(f"{number}. {who}: {cut_at_word(message.content, 48) or '(empty)'}")
            action.setToolTip("A new conversation with the messages up to and including this one")
            assert conversation_id is not None
            action.triggered.connect(lambda *_, c=conversation_id, m=message.id: self.branch(c, m))
        menu.setToolTipsVisible(True)
