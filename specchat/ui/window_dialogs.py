"""The dialogs the window opens: models, draft finder, remote devices, system prompts, delete, export, About.

Each opener returns its dialog (tests drive it); what a dialog decides goes to the controller, the loader or
the settings, never back through the window.
"""

from __future__ import annotations

import dataclasses
import html
import sqlite3
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QFileDialog, QMainWindow, QMessageBox, QStatusBar, QTextEdit

from specchat import __version__
from specchat.core.build import BuildInfo
from specchat.core.chat.store import ConversationStore
from specchat.core.chat.titles import export_filename
from specchat.core.models.fit import machine_memory
from specchat.core.settings import Settings, save_servers, saved_free
from specchat.core.types import SpecchatError

from .chat_controller import ChatController
from .draft_finder import DraftFinderDialog, open_finder
from .finder_pick import FinderPick
from .model_picker import ModelPickerDialog
from .pair_loading import PairLoader
from .remote_devices import RemoteDevicesDialog
from .system_prompt import SystemPromptDialog
from .window_layout import SystemPromptChip


class WindowDialogs(QObject):
    """Opens the window's dialogs and carries out what they ask."""

    def __init__(
        self,
        window: QMainWindow,
        settings: Settings,
        store: ConversationStore,
        chat: ChatController,
        loader: PairLoader,
        pick: FinderPick,
        chip: SystemPromptChip,
        build: BuildInfo | None,
        notice: Callable[[str], None],
    ) -> None:
        super().__init__(window)
        self.window, self.settings, self.store, self.chat, self.chip = window, settings, store, chat, chip
        self.loader, self.pick, self.build, self.notice = loader, pick, build, notice

    @property
    def status(self) -> QStatusBar:
        return self.window.statusBar()

    def model_picker(self) -> ModelPickerDialog:
        memory = machine_memory()
        info = self.loader.info
        if info is not None and info.gpu_bytes:
            # The loaded pair is closed before the next load: its GPU memory is free for the new one.
            memory = dataclasses.replace(memory, gpu_free=memory.gpu_free + info.gpu_bytes)
        if self.loader.remote_servers:  # the target's layers go there: as much as the latest Test found free
            free = saved_free()
            memory = dataclasses.replace(memory, remote_free=sum(free.get(s, 0) for s in self.loader.remote_servers))
        dialog = ModelPickerDialog(
            self.settings.last_target,
            self.settings.last_draft,
            self.window,
            n_ctx=self.loader.panel.controls.context_size.value(),
            memory=memory,
        )
        # Deleted once closed, with its tabs' workers (done() stops them first): a closed picker holds nothing.
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.load_requested.connect(self.loader.load)
        dialog.advice_chosen.connect(self.pick.use)
        dialog.demo_requested.connect(self.loader.load_demo)
        dialog.setModal(True)
        dialog.show()
        return dialog

    def draft_finder(self) -> DraftFinderDialog | None:
        """The draft finder for the loaded (or last) pair; "Use this" loads its pick with its depth."""
        info = self.loader.info
        target = info.target_path if info is not None else self.settings.last_target
        if not target or not Path(target).is_file():
            self.notice("choose a target model first (File → Choose models…), then find its best draft")
            return None
        draft = info.draft_path if info is not None else self.settings.last_draft
        dialog = open_finder(target, draft if draft and Path(draft).is_file() else "", self.window)
        dialog.use_requested.connect(self.pick.use)
        return dialog

    def about(self) -> QMessageBox:
        """The version and what this llama.cpp build can do (GPU offload, devices): the first thing to check."""
        box = QMessageBox(self.window)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.setWindowTitle("About specchat")
        box.setIcon(QMessageBox.Icon.Information)
        box.setText(f"<b>specchat {__version__}</b><br>Local speculative decoding on llama.cpp.")
        lines = self.build.lines() if self.build else ["llama.cpp build: not reported", ""]
        box.setInformativeText("<br>".join(html.escape(line) for line in lines[:-1]))
        box.setDetailedText("\n".join(lines))
        roomy_details(box)
        box.setStandardButtons(QMessageBox.StandardButton.Ok)
        box.setModal(True)
        box.show()
        return box

    def remote_devices(self) -> RemoteDevicesDialog:
        """Edit the servers that hold the target's layers."""
        from specchat.core.runtime.remote import probe_servers, rpc_available

        dialog = RemoteDevicesDialog(
            self.loader.remote_servers, probe_servers, available=rpc_available(), parent=self.window
        )
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self.set_remote_servers(dialog.servers(), dialog.free))
        dialog.open()
        return dialog

    def set_remote_servers(self, servers: list[str], free: dict[str, int] | None = None) -> None:
        """Keep the server list (and what a Test found free on them); it applies on the next load."""
        changed = tuple(servers) != tuple(self.loader.remote_servers)
        self.loader.remote_servers = tuple(servers)
        try:
            save_servers(self.loader.remote_servers, free=free)
        except OSError as exc:
            self.status.showMessage(f"could not save the remote servers: {exc.strerror or exc}", 8000)
            return
        if changed:
            where = "the remote devices" if servers else "this machine alone"
            self.status.showMessage(f"The target runs on {where} from the next load (File → Reload models)", 8000)

    def system_prompt(self) -> SystemPromptDialog:
        """Edit the open conversation's system prompt."""
        dialog = SystemPromptDialog(
            "System prompt",
            "Sent before the conversation with every reply from now on; stored with this conversation.",
            self.chat.transcript.system_prompt,
            self.window,
        )
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

        def save() -> None:
            self.chat.set_system_prompt(dialog.text())
            self.chip.show_prompt(self.chat.transcript.system_prompt)

        dialog.accepted.connect(save)
        dialog.open()
        return dialog

    def default_system_prompt(self) -> SystemPromptDialog:
        """Edit the system prompt new conversations start with."""
        dialog = SystemPromptDialog(
            "Default system prompt",
            "New conversations start with this system prompt (empty: none).",
            self.settings.system_prompt,
            self.window,
        )
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

        def apply() -> None:
            self.settings.system_prompt = self.chat.default_system_prompt = dialog.text()

        dialog.accepted.connect(apply)
        dialog.open()
        return dialog

    def confirm_delete(self, conversation_id: int) -> QMessageBox:
        """Ask before deleting a conversation."""
        try:
            title = self.store.conversation(conversation_id).title
        except (sqlite3.Error, SpecchatError):
            title = "this conversation"
        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Delete conversation",
            f"Delete \u201c{title}\u201d and all its messages? This cannot be undone.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            self.window,
        )
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.accepted.connect(lambda: self.chat.delete_conversation(conversation_id))
        box.open()
        return box

    def export(self, kind: str, path: str | None = None) -> None:
        """Write the open conversation as Markdown (``"md"``) or JSON, asking where unless ``path`` is given."""
        cid = self.chat.conversation_id
        if cid is None:
            return
        try:
            if path is None:
                title = self.store.conversation(cid).title
                pattern = "Markdown (*.md)" if kind == "md" else "JSON (*.json)"
                path, _ = QFileDialog.getSaveFileName(
                    self.window, "Export conversation", export_filename(title, kind), pattern
                )
                if not path:
                    return
            text = self.store.export_markdown(cid) if kind == "md" else self.store.export_json(cid)
            Path(path).write_text(text, encoding="utf-8")
        except (OSError, sqlite3.Error, SpecchatError) as exc:
            self.notice(f"could not export: {exc}")
            return
        self.status.showMessage(f"Exported to {path}", 5000)


DETAILS_SIZE = (560, 240)  # the About box's details: the build's lines readable without scrolling sideways


def roomy_details(box: QMessageBox) -> None:
    """Give a message box's details (Qt's default is a few lines, narrow) room and a fixed-width font."""
    details = box.findChild(QTextEdit)
    if details is None:
        return
    details.setMinimumSize(*DETAILS_SIZE)
    details.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
    details.setLineWrapMode(QTextEdit.LineWrapMode.NoWrap)
