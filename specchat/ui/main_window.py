"""The main window: its panels, and the wiring between the engine thread, the conversation and the views.

Its parts live in modules of their own: the panels (:mod:`.window_layout`), the menus (:mod:`.menus`), the look
and its persistence (:mod:`.window_settings`), loading a pair (:mod:`.pair_loading`), the plain-decoding
baseline (:mod:`.baselines`), the draft finder's pick (:mod:`.finder_pick`), races (:mod:`.reply_races`), the
dialogs (:mod:`.window_dialogs`) and the sampler presets (:mod:`.presets`).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QApplication, QMainWindow, QMenu, QSplitter, QStackedWidget, QVBoxLayout, QWidget

from specchat.core.build import BuildInfo
from specchat.core.chat.store import ConversationStore
from specchat.core.chat.transcript import ReplyFigures, Transcript
from specchat.core.engine.depth import DepthControl
from specchat.core.settings import Settings, save_settings
from specchat.core.types import Drafted, DrafterKind, Event, Finished

from .banner import ErrorBanner
from .baselines import BaselineKeeper
from .chat_controller import ChatController, ReplySettings
from .composer_files import ComposerFiles
from .conversation_ops import ConversationOps
from .design import use_base_font
from .finder_pick import FinderPick
from .lookup_memory import LookupMemoryKeeper
from .menus import build_menus
from .pair_loading import PairLoader
from .presets import PresetKeeper
from .prompt_read_ahead import PromptReadAhead
from .race import RaceController
from .reply_races import ReplyRaces
from .server_panel import LocalServing
from .shortcuts_dialog import ShortcutsDialog
from .sidebar import ConversationSidebar
from .status_progress import READING_PROMPT, StatusProgress
from .welcome import WelcomeView
from .window_dialogs import WindowDialogs
from .window_layout import ChatPage, SettingsPanel
from .window_settings import WindowLook
from .worker import ModelInfo, WindowRuntimeHost

log = logging.getLogger(__name__)


class MainWindow(QMainWindow):
    """Conversations on the left, the chat in the middle, speculation controls and stats on the right."""

    models_loaded = Signal(object)  # ModelInfo
    reply_finished = Signal(object)  # Finished
    error_shown = Signal(str)

    def __init__(
        self,
        settings: Settings,
        store: ConversationStore,
        parent: QWidget | None = None,
        *,
        host: WindowRuntimeHost | None = None,
        build: BuildInfo | None = None,
    ) -> None:
        super().__init__(parent)
        self.settings, self.store, self.llama_build = settings, store, build
        self.host = host if host is not None else WindowRuntimeHost(self)
        self._closing = False
        self._send_after_load = ""  # a message typed before any pair was loaded
        self.last_error = ""
        self.setWindowTitle("specchat")
        self.resize(1200, 760)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            use_base_font(app)  # Qt gives an application font only to widgets made after it: the window is older
            self.setFont(app.font())
        self._build()
        self._connect()
        self.look.restore()
        self._reopen_last_conversation()
        self.refresh_conversations()
        self._update_actions()
        self.files.refresh()
        if store.notice:
            self.show_error(store.notice)

    def _build(self) -> None:
        self.sidebar = ConversationSidebar()
        self.sidebar.searcher = self.store.search
        self.welcome = WelcomeView()
        self.panel = SettingsPanel(self.settings, offload=bool(self.llama_build and self.llama_build.offload))
        self.controls, self.stats = self.panel.controls, self.panel.stats
        # The engine reads the depth at the start of every round; the panel is the one place that sets it.
        self.depth_control = DepthControl(self.controls.chosen_depth)
        self.controls.depth_changed.connect(self.depth_control.set)
        self.chat = ChatController(self.store, self.host, self._reply_settings, self.depth_control, self)
        self.chat.default_system_prompt = self.settings.system_prompt
        self.page = ChatPage(self.settings, self.chat.transcript)
        self.chat_view, self.composer = self.page.chat_view, self.page.composer
        self.banner = ErrorBanner()  # its colours follow the theme
        self.banner.hide()
        self.stack = QStackedWidget()
        self.stack.addWidget(self.welcome)
        self.stack.addWidget(self.page)
        center = QWidget()
        center_layout = QVBoxLayout(center)
        center_layout.setContentsMargins(4, 4, 4, 4)
        center_layout.addWidget(self.banner)
        center_layout.addWidget(self.stack, 1)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        for part in (self.sidebar, center, self.panel):
            self.splitter.addWidget(part)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setCollapsible(1, False)
        self.splitter.setSizes([160, 740, 300])
        self.setCentralWidget(self.splitter)
        self.progress = StatusProgress(self.statusBar())

        streaming = lambda: self.streaming  # noqa: E731 - read when asked
        self.loader = PairLoader(
            self.host, self.settings, self.panel, self.welcome, self.progress, self.statusBar(), streaming, self
        )
        self.baselines = BaselineKeeper(
            self.host, self.settings, self.controls, self.stats, self.statusBar(), lambda: self.loader.info, self
        )
        self.pick = FinderPick(self.loader, self.controls, self.statusBar(), streaming, self.show_error, self)
        self.presets = PresetKeeper(self.panel.presets, self.controls, self.store, self.settings, self)
        self.dialogs = WindowDialogs(
            self,
            self.settings,
            self.store,
            self.chat,
            self.loader,
            self.pick,
            self.page.system_prompt_chip,
            self.llama_build,
            self.show_error,
        )
        self.races = RaceController(self.store, self.host, lambda: self.chat.transcript, self)
        self.racing = ReplyRaces(
            self.races,
            self.chat,
            lambda: self.loader.info is not None,
            self.show_error,
            self,
            lambda: b.tokens_per_second if (b := self.baselines.current()) else 0.0,
        )
        self.look = WindowLook(
            self, self.settings, self.splitter, self.sidebar, self.panel, self.chat_view, self.composer
        )
        self.serving = LocalServing(self, self.host, self.loader, self.settings)
        self.ops = ConversationOps(self.store, self.chat, self.show_error, self)
        self.sidebar.branch_menu_filler = self.ops.fill_branch_menu
        self.menu_actions = build_menus(self, self, self.presets.save_current)  # Esc (Stop) among them
        self.lookup_memory = LookupMemoryKeeper(self.store.path, self)  # off the GUI thread
        self.files = ComposerFiles(
            self.composer,
            self.page.attachments,
            self.page.context_meter,
            self.chat_view.viewport(),
            self.host,
            history=lambda: self.chat.transcript.history(),
            loaded_n_ctx=lambda: self.loader.info.n_ctx if self.loader.info is not None else 0,
            chosen_n_ctx=self.controls.context_size.value,
            reply_room=self.controls.max_tokens.value,
            show_error=self.show_error,
            parent=self,
        )
        self.read_ahead = PromptReadAhead(
            self.host,
            self.files,
            enabled=self.settings.read_ahead,
            ready=lambda: self.loader.info is not None and not self.loader.loading and not self.streaming,
            drafter=lambda: self.controls.drafter_kind,
            status=self.statusBar(),
            parent=self,
        )

    def _connect(self) -> None:
        w, chat, page = self.host.worker, self.chat, self.page
        w.events.connect(chat.on_events)
        w.prompt_progress.connect(self._on_prompt_progress)
        self.host.waiting_because.connect(self.progress.waiting_because)  # a reply that cannot join the batch
        self.host.waiting.connect(self.progress.engine_waiting)  # a served request holds the runtime
        self.host.waiting.connect(chat.reply_waiting)  # the time to first token counts from when decoding began
        w.failed.connect(chat.on_failed)
        chat.transcript_replaced.connect(self._on_transcript_replaced)
        chat.message_appended.connect(self._on_message_appended)
        chat.events_folded.connect(self._on_events_folded)
        chat.reply_finished.connect(self._on_reply_finished)
        chat.conversations_changed.connect(self.refresh_conversations)
        chat.notice.connect(self.show_error)
        chat.status.connect(lambda text: self.statusBar().showMessage(text, 8000))
        chat.composer_text.connect(self._on_composer_text)
        chat.composer_attachments.connect(self.files.set_all)
        page.attach_button.clicked.connect(self.files.choose)
        self.loader.started.connect(self.hide_error)
        self.loader.started.connect(self._update_actions)
        self.loader.loaded.connect(self._on_loaded)
        self.loader.failed.connect(self._on_load_failed)
        self.loader.notice.connect(self.show_error)
        self.models_loaded.connect(self.pick.pair_loaded)
        self.baselines.measured.connect(lambda _rate: self._update_actions())
        self.composer.send_requested.connect(self.send)
        self.composer.stop_requested.connect(self.stop)
        page.send_button.clicked.connect(self.composer.send)
        page.stop_button.clicked.connect(self.stop)
        page.regenerate_button.clicked.connect(self.regenerate)
        page.system_prompt_chip.clicked.connect(self.dialogs.system_prompt)
        self.chat_view.regenerate_requested.connect(self.regenerate)
        self.chat_view.edit_requested.connect(self.edit_message)
        self.chat_view.version_requested.connect(chat.switch_version)
        self.chat_view.race_requested.connect(self.racing.race)
        self.chat_view.continue_requested.connect(self.continue_reply)
        self.races.notice.connect(self.show_error)
        self.races.started.connect(lambda: self.statusBar().showMessage("Racing speculative against plain decoding…"))
        self.races.started.connect(self._update_actions)
        self.races.ended.connect(self.statusBar().clearMessage)
        self.races.ended.connect(self._update_actions)
        self.stats.measure_requested.connect(self.baselines.measure)
        self.lookup_memory.ready.connect(self.host.set_lookup_memory)
        self.controls.lookup_memory_changed.connect(self.lookup_memory.set_enabled)
        self.reply_finished.connect(
            lambda _finished: self.lookup_memory.remember(
                [m.content for m in chat.transcript.messages[-2:] if m.content]
            )
        )
        self.lookup_memory.set_enabled(self.settings.lookup_memory)
        self.controls.read_ahead_changed.connect(self.read_ahead.set_enabled)
        # A reply, a load or another conversation: stop reading ahead; read again once the runtime is free.
        chat.reply_started.connect(self.read_ahead.stop)
        self.loader.started.connect(self.read_ahead.stop)
        self.models_loaded.connect(lambda _info: self.read_ahead.changed())
        self.reply_finished.connect(lambda _finished: self.read_ahead.changed())
        chat.transcript_replaced.connect(self.read_ahead.changed)
        self.welcome.demo_requested.connect(self.loader.load_demo)
        self.welcome.picker_requested.connect(self.dialogs.model_picker)
        self.sidebar.new_requested.connect(self.new_conversation)
        self.sidebar.selected.connect(chat.open_conversation)
        self.sidebar.rename_requested.connect(chat.rename)
        self.sidebar.delete_requested.connect(self.dialogs.confirm_delete)
        self.sidebar.pin_requested.connect(self.ops.set_pinned)
        self.sidebar.duplicate_requested.connect(self.ops.duplicate)

    # -- state -------------------------------------------------------------------------

    @property
    def model_info(self) -> ModelInfo | None:
        return self.loader.info

    @property
    def conversation_id(self) -> int | None:
        return self.chat.conversation_id

    @property
    def transcript(self) -> Transcript:
        return self.chat.transcript

    @property
    def streaming(self) -> bool:
        return self.chat.streaming

    # -- models ------------------------------------------------------------------------

    def load_models(self, target: str | Path, draft: str | Path | None = None) -> None:
        self.loader.load(target, draft)

    def _on_loaded(self, info: ModelInfo) -> None:
        self.chat.offered = info.offered
        self.files.forget_counts()  # this pair's tokenizer counts the meter from now on
        self.stack.setCurrentIndex(1)
        self._update_actions()
        self.composer.setFocus()
        self.baselines.measuring = ""
        self.baselines.check(self.streaming)  # a short calibration right after loading, before any reply
        self.models_loaded.emit(info)
        pending, self._send_after_load = self._send_after_load, ""
        if pending:
            self.send(pending)

    def _on_load_failed(self, message: str) -> None:
        self._update_actions()
        self.show_error(message)
        pending, self._send_after_load = self._send_after_load, ""
        if pending and not self.composer.toPlainText().strip():
            self.composer.setPlainText(pending)

    # -- conversations -----------------------------------------------------------------

    def refresh_conversations(self) -> None:
        self.settings.last_conversation = self.chat.conversation_id or 0  # reopened on the next start
        try:
            conversations = self.store.conversations()
        except sqlite3.Error as exc:
            self.show_error(f"the conversations could not be listed: {exc}")
            return
        self.sidebar.set_conversations(conversations, self.chat.conversation_id)
        shown = next((c for c in conversations if c.id == self.chat.conversation_id), None)
        title = shown.title if shown is not None else ""
        self.menu_actions.pin.setEnabled(shown is not None)
        self.menu_actions.pin.setText(
            "Unp&in this conversation" if shown and shown.pinned else "P&in this conversation"
        )
        self.setWindowTitle(f"{title} — specchat" if title.strip() else "specchat")  # the open conversation's

    def new_conversation(self) -> None:
        self.chat.new_conversation()

    def _reopen_last_conversation(self) -> None:
        """On start, show the conversation that was open last, readable without any model loaded."""
        last = self.settings.last_conversation
        try:
            known = last and any(c.id == last for c in self.store.conversations())
        except sqlite3.Error:
            known = False
        if known:
            self.chat.open_conversation(last)

    # -- replies -----------------------------------------------------------------------

    def send(self, text: str) -> None:
        """Send a user message and stream the reply (loading last session's pair first if none is loaded)."""
        if not (text.strip() or self.files.attachments) or self.streaming:
            return
        if not self.files.fits(lambda: self.send(self.composer.toPlainText())):
            return  # asked whether to cut a document that does not fit; accepting sends again
        if self.loader.info is None:
            if self.loader.can_load_last_pair() and not self.loader.loading:
                self._send_after_load = text.strip()
                self.composer.clear()
                self.loader.load_last_pair()
            elif not self.loader.loading:
                self.show_error("load a model first")
            return
        if self.chat.send(text, self.files.attachments):
            self.composer.clear()
            self.files.clear()

    def regenerate(self) -> None:
        """Generate the last reply again; the old one stays stored until the new one's first round."""
        if self.loader.info is not None:
            self.chat.regenerate()

    def continue_reply(self) -> None:
        """Go on with the last reply where the token limit cut it (speculatively, into the same message)."""
        if self.loader.info is None:
            self.show_error("load a model to continue the reply")
        elif self.chat.continue_reply():
            self.hide_error()

    def edit_message(self, index: int) -> None:
        """Put a user message back in the composer; sending replaces it and what followed, Esc keeps them."""
        self.chat.edit_message(index)
        if self.chat.editing:
            self.composer.setFocus()

    def stop(self) -> None:
        """Cancel the streaming reply (it ends within one round), or abandon an edit."""
        if self.chat.editing and not self.streaming:
            self.statusBar().clearMessage()
        self.chat.stop()

    # -- keyboard and the Conversation menu -----------------------------------------------

    def edit_last_message(self) -> None:
        """Put the last message you sent back in the composer (as its Edit action does)."""
        msgs = self.chat.transcript.messages
        index = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].role == "user"), None)
        if index is not None and not self.streaming:
            self.edit_message(index)

    def copy_last_reply(self) -> None:
        """Put the last reply's text (its Markdown source) on the clipboard."""
        msgs = self.chat.transcript.messages
        index = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].role == "assistant"), None)
        if index is not None:
            self.chat_view.copy_message(index)
            self.statusBar().showMessage("Copied the last reply", 3000)

    def focus_composer(self) -> None:
        if self.stack.currentWidget() is self.page:
            self.composer.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def search_conversations(self) -> None:
        """Show the conversations (if hidden) and put the cursor in their search field."""
        self.look.set_sidebar_visible(True)
        self.sidebar.search_field.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.sidebar.search_field.selectAll()

    def show_settings(self) -> None:
        """Show the settings panel (if hidden) at its top, its first control under the keyboard."""
        self.look.set_panel_visible(True)
        self.panel.verticalScrollBar().setValue(0)
        first = next(
            (
                w
                for w in self.panel.findChildren(QWidget)
                if w.isEnabled() and w.isVisibleTo(self.panel) and w.focusPolicy() & Qt.FocusPolicy.TabFocus
            ),
            None,
        )
        if first is not None:
            first.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def toggle_pin(self) -> None:
        cid = self.chat.conversation_id
        if cid is not None:
            self.ops.set_pinned(cid, not self.ops.is_pinned(cid))

    def duplicate_conversation(self) -> None:
        if self.chat.conversation_id is not None:
            self.ops.duplicate(self.chat.conversation_id)

    def fill_branch_menu(self, menu: QMenu) -> None:
        self.ops.fill_branch_menu(menu, self.chat.conversation_id)

    def keyboard_shortcuts(self) -> ShortcutsDialog:
        """Help → Keyboard shortcuts (Ctrl+/, F1): every menu action's keys."""
        dialog = ShortcutsDialog(self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def _reply_settings(self) -> ReplySettings:
        return ReplySettings(self.controls.generation_params(), self.controls.drafter_kind)

    def _on_transcript_replaced(self) -> None:
        if self.chat.conversation_id is not None:
            self.stack.setCurrentIndex(1)  # old chats are readable before any model loads
        self.chat_view.show_transcript(self.chat.transcript)
        self.page.system_prompt_chip.show_prompt(self.chat.transcript.system_prompt)
        self.presets.show_conversation(self.chat.conversation_id)
        self.stats.set_transcript(self.chat.transcript)
        self.files.refresh()  # another conversation: another prompt to count
        reply = next((m for m in reversed(self.chat.transcript.messages) if m.role == "assistant"), None)
        if reply is not None and not reply.finished and reply.figures is not None and self.chat.streaming_here:
            self._follow_reply(reply.figures)  # shown again mid-reply, or continued: its figures stay live
        else:
            self.stats.show_stored(reply.figures if reply is not None and reply.figures else ReplyFigures())
        self._update_actions()

    def _follow_reply(self, figures: ReplyFigures) -> None:
        """The panel follows a streaming reply; until its first round, "Reading the prompt…"."""
        self.stats.set_baseline(self.baselines.current())
        self.stats.set_auto_drafting(
            self.controls.drafter_kind != DrafterKind.NONE and self.controls.chosen_depth is None
        )
        self.stats.follow(figures)
        carried = figures.carried  # a continuation: the rounds before it were the reply's first part
        if figures.generated == (carried.generated if carried is not None else 0):
            self.progress.busy(READING_PROMPT)  # until the first token

    def _on_message_appended(self) -> None:
        self.chat_view.append_message()
        self.stats.set_transcript(self.chat.transcript)
        reply = self.chat.transcript.reply
        if reply is not None and not reply.finished and reply.figures is not None:
            self.hide_error()
            self.presets.keep_for(self.chat.conversation_id)  # a first message made the conversation
            self._follow_reply(reply.figures)
            self._update_actions()

    def _on_events_folded(self, batch: list[Event]) -> None:
        self.chat_view.feed(batch)
        self.stats.refresh()
        reply = self.chat.transcript.reply
        if reply is not None and reply.figures is not None:
            if reply.figures.passes:
                self.progress.done_busy()
            if reply.figures.passes or any(isinstance(e, Drafted) for e in batch):
                self.controls.show_live_depth(reply.figures.depth)  # not a reply that failed before any round

    def _on_prompt_progress(self, done: int, total: int) -> None:
        if self.streaming and total > 0:
            self.progress.prompt_read(done, total)

    def _on_reply_finished(self, finished: Finished) -> None:
        self.progress.done_busy()
        self.chat_view.flush()
        self.baselines.remember_probe(finished)
        self.files.refresh()  # the reply is part of the next prompt now
        self.stats.refresh()
        self.baselines.check(self.streaming)
        self._update_actions()
        self.reply_finished.emit(finished)

    def _on_composer_text(self, text: str, replace: bool) -> None:
        if replace or not self.composer.toPlainText().strip():
            self.composer.setPlainText(text)

    def _update_actions(self) -> None:
        """Enable what can act now: a loaded pair, no load running, no reply streaming."""
        loading, page, a = self.loader.loading, self.page, self.menu_actions
        loaded = self.loader.info is not None
        ready = loaded and not loading and not self.streaming
        lazy = not loaded and not loading and self.loader.can_load_last_pair()
        self.composer.setEnabled(not loading and (loaded or self.loader.can_load_last_pair()))
        page.send_button.setEnabled(ready or lazy)
        page.attach_button.setEnabled(self.composer.isEnabled())
        page.regenerate_button.setEnabled(ready and self.chat.can_regenerate())
        a.regenerate.setEnabled(page.regenerate_button.isEnabled())
        a.duplicate.setEnabled(self.chat.conversation_id is not None and not self.chat.streaming_here)
        page.stop_button.setEnabled(self.chat.streaming_here)
        self.stats.measure_button.setEnabled(ready and not self.baselines.measuring)
        a.reload.setEnabled(self.loader.last_load is not None and not loading and not self.streaming)
        a.continue_reply.setEnabled(ready and self.chat.can_continue())
        why = self.racing.refusal(self.racing.last_reply())
        a.race.setEnabled(not why)
        a.race.setToolTip(
            why
            or "Decode the last reply's prompt with the target alone and "
            "replay both streams side by side (or replay the stored race)"
        )

    def show_error(self, message: str) -> None:
        self.last_error = message
        self.banner.setText(message)
        self.banner.show()
        self.error_shown.emit(message)

    def hide_error(self) -> None:
        self.banner.hide()

    # -- lifecycle -------------------------------------------------------------------------

    def save_settings(self) -> None:
        self.controls.store_settings(self.settings)
        self.pick.keep_yours(self.settings)
        self.look.store()
        try:
            save_settings(self.settings)
        except OSError as exc:
            log.warning("could not save settings: %s", exc)

    def closeEvent(self, event: QCloseEvent) -> None:
        """Cancel any reply, join the engine thread, save settings; no hang, no traceback."""
        if not self._closing:
            self._closing = self.loader.closing = self.baselines.closing = True
            self.stop()
            self.serving.stop()  # before the runtime goes
            self.host.shutdown()
            self.chat.close()
            self.lookup_memory.close()
            self.chat_view.flush()
            self.save_settings()
        super().closeEvent(event)
