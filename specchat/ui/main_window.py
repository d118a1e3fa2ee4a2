"""The main window: layout, menus and actions, wiring the engine thread to the views and the store."""

from __future__ import annotations

import dataclasses
import html
import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QByteArray, Qt, Signal
from PySide6.QtGui import QAction, QActionGroup, QCloseEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from specchat import __version__
from specchat.core.build import BuildInfo
from specchat.core.chat.baseline import Baseline, baseline_key, remember
from specchat.core.chat.race import RaceRecord, race_refusal
from specchat.core.chat.store import ConversationStore
from specchat.core.chat.transcript import Message, ReplyFigures, Transcript
from specchat.core.engine.depth import DepthControl
from specchat.core.models.fit import machine_memory
from specchat.core.settings import Settings, load_servers, save_servers, save_settings, saved_free
from specchat.core.types import Drafted, DrafterKind, Event, Finished, SamplerParams, SpecchatError

from .banner import ErrorBanner
from .chat_controller import ChatController, ReplySettings
from .chat_view import ChatView, TokenLegend
from .composer import Composer
from .controls import SpeculationControls
from .draft_finder import DrafterSetup, DraftFinderDialog, FinderChoice
from .lookup_memory import LookupMemoryKeeper
from .model_picker import ModelPickerDialog
from .race import RaceController, RacePanel
from .remote_devices import RemoteDevicesDialog
from .sidebar import ConversationSidebar
from .stats_panel import StatsPanel
from .system_prompt import SystemPromptDialog
from .theme import apply_theme, clamp_zoom
from .welcome import WelcomeView
from .worker import EngineHost, LoadOptions, ModelInfo

log = logging.getLogger(__name__)


class MainWindow(QMainWindow):
    """Conversations on the left, the chat in the middle, speculation controls and stats on the right."""

    models_loaded = Signal(object)  # ModelInfo
    reply_finished = Signal(object)  # Finished
    error_shown = Signal(str)
    events_received = Signal(list)  # each batch from the engine, re-emitted on the GUI thread
    baseline_measured = Signal(float)

    def __init__(self, settings: Settings, store: ConversationStore, parent: QWidget | None = None, *,
                 host: EngineHost | None = None, build: BuildInfo | None = None) -> None:
        super().__init__(parent)
        self.settings = settings
        self.store = store
        self.llama_build = build
        self.remote_servers = load_servers()  # where the target's layers go (none: this machine)
        self.host = host if host is not None else EngineHost(self)
        self.model_info: ModelInfo | None = None
        self.depth_control = DepthControl(settings.depth)
        self.chat = ChatController(store, self.host, self._reply_settings, self.depth_control, self)
        self.chat.default_system_prompt = settings.system_prompt
        self.races = RaceController(store, self.host, lambda: self.chat.transcript, self)
        self.race_panel: RacePanel | None = None
        self._closing = False
        self.loading = False
        self._last_load: Callable[[], None] | None = None  # how the last pair was loaded, for Reload
        self._send_after_load = ""  # a message typed before any pair was loaded
        self._measuring = ""  # the baseline key being measured
        self._reading_prompt = False  # the progress bar shows how much of a long prompt was read
        self.last_error = ""
        self.setWindowTitle("specchat")
        self.resize(1200, 760)
        self._build()
        self._build_menus()
        self._update_actions()
        self._connect()
        self._restore_window()
        self._reopen_last_conversation()
        self.refresh_conversations()
        if store.notice:
            self.show_error(store.notice)

    # -- layout ------------------------------------------------------------------------

    def _build(self) -> None:
        self.sidebar = ConversationSidebar()
        self.sidebar.searcher = self.store.search
        self.welcome = WelcomeView()
        self.chat_view = ChatView(transcript=self.chat.transcript)
        self.chat_view.set_hide_rejected(self.settings.hide_rejected)
        self.chat_view.set_show_verdicts(self.settings.show_verdicts)
        self.composer = Composer()
        lines = self.composer.fontMetrics().lineSpacing()
        self.composer.setMaximumHeight(lines * 5 + 16)  # grows to five lines, then scrolls: the chat keeps the room
        self.send_button = QPushButton("Send")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the reply (Esc)")
        self.stop_button.setEnabled(False)
        self.regenerate_button = QPushButton("Regenerate")
        self.regenerate_button.setToolTip("Generate the last reply again")

        self.banner = ErrorBanner()  # its colours follow the theme
        self.banner.hide()

        chat_page = QWidget()
        chat_layout = QVBoxLayout(chat_page)
        chat_layout.setContentsMargins(0, 0, 0, 0)
        legend = TokenLegend(view=self.chat_view)
        legend.setWordWrap(True)  # wraps rather than widening a narrow window
        self.system_prompt_chip = QPushButton()
        self.system_prompt_chip.setFlat(True)
        self.system_prompt_chip.setCursor(Qt.CursorShape.PointingHandCursor)
        self.system_prompt_chip.setToolTip("This conversation has a system prompt: click to edit it")
        self.system_prompt_chip.setStyleSheet("text-align: left; padding: 2px 6px;")
        self.system_prompt_chip.clicked.connect(self.edit_system_prompt)
        self.system_prompt_chip.hide()
        chat_layout.addWidget(self.system_prompt_chip)
        chat_layout.addWidget(legend)
        chat_layout.addWidget(self.chat_view, 1)
        row = QHBoxLayout()
        row.addWidget(self.composer, 1)
        buttons = QVBoxLayout()
        for b in (self.send_button, self.stop_button, self.regenerate_button):
            buttons.addWidget(b)
        row.addLayout(buttons)
        chat_layout.addLayout(row)

        self.stack = QStackedWidget()
        self.stack.addWidget(self.welcome)
        self.stack.addWidget(chat_page)
        center = QWidget()
        center_layout = QVBoxLayout(center)
        center_layout.setContentsMargins(4, 4, 4, 4)
        center_layout.addWidget(self.banner)
        center_layout.addWidget(self.stack, 1)

        self.model_label = QLabel("No models loaded")
        self.model_label.setWordWrap(True)
        self.controls = SpeculationControls(self.settings, offload=bool(self.llama_build and self.llama_build.offload))
        self.stats = StatsPanel()
        self.stats.measure_button.setEnabled(False)  # until a pair is loaded
        panel = QWidget()
        right_layout = QVBoxLayout(panel)
        right_layout.setContentsMargins(4, 4, 4, 4)
        right_layout.addWidget(self.model_label)
        right_layout.addWidget(self.controls)
        right_layout.addWidget(self.stats, 1)
        # Scrolls rather than squeezing its rows when the window is small (900x600 and below).
        self.panel = QScrollArea()
        self.panel.setWidget(panel)
        self.panel.setWidgetResizable(True)
        self.panel.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.panel.setFrameShape(QFrame.Shape.NoFrame)
        self.panel.setMinimumWidth(panel.minimumSizeHint().width() + self.panel.verticalScrollBar().sizeHint().width())

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(center)
        self.splitter.addWidget(self.panel)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setCollapsible(1, False)
        self.splitter.setSizes([160, 740, 300])
        self.setCentralWidget(self.splitter)

        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setMaximumWidth(240)
        self.progress.hide()
        self.statusBar().addPermanentWidget(self.progress)
        # "Use this" in the draft finder is undone here; shown while its pick holds (see use_advice).
        self.undo_advice_button = QPushButton("Undo the draft finder's choice")
        self.undo_advice_button.hide()
        self.undo_advice_button.clicked.connect(self.undo_advice)
        self.statusBar().addPermanentWidget(self.undo_advice_button)
        self._advice: FinderChoice | None = None  # the finder's pick while it holds
        self._setup_on_load: DrafterSetup | None = None  # applied once its own pair has loaded
        self.models_loaded.connect(self._advice_pair_loaded)

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.new_action = file_menu.addAction("&New conversation", QKeySequence.StandardKey.New, self.new_conversation)
        file_menu.addAction("&Choose models…", QKeySequence.StandardKey.Open, self.open_model_picker)
        file_menu.addAction("Load the offline &demo pair", self.load_demo)
        file_menu.addAction("&Find the best draft…", self.open_draft_finder)
        self.reload_action = file_menu.addAction("&Reload models", QKeySequence("Ctrl+R"), self.reload_models)
        self.reload_action.setToolTip("Load the same pair again with the current context size and GPU layers")
        file_menu.addAction("Remote &devices…", self.edit_remote_devices)
        file_menu.addSeparator()
        file_menu.addAction("Export as &Markdown…", lambda: self.export_conversation("md"))
        file_menu.addAction("Export as &JSON…", lambda: self.export_conversation("json"))
        file_menu.addSeparator()
        file_menu.addAction("&Quit", QKeySequence.StandardKey.Quit, self.close)

        chat_menu = self.menuBar().addMenu("&Conversation")
        chat_menu.addAction("&System prompt…", self.edit_system_prompt)
        chat_menu.addAction("&Default system prompt for new conversations…", self.edit_default_system_prompt)
        chat_menu.addSeparator()
        self.previous_version_action = chat_menu.addAction(
            "&Previous version of the last reply", QKeySequence("Alt+Left"), lambda: self.switch_version(-1))
        self.next_version_action = chat_menu.addAction(
            "&Next version of the last reply", QKeySequence("Alt+Right"), lambda: self.switch_version(+1))
        chat_menu.addSeparator()
        self.continue_action = chat_menu.addAction("&Continue the last reply", self.continue_reply)
        self.continue_action.setToolTip("Go on from where the token limit cut the last reply")
        self.race_action = chat_menu.addAction("&Race plain decoding on the last reply", self.race_last_reply)
        chat_menu.setToolTipsVisible(True)  # a disabled race says why

        view_menu = self.menuBar().addMenu("&View")
        self.sidebar_action = QAction("&Conversations", self, checkable=True)
        self.sidebar_action.setShortcut(QKeySequence("Ctrl+Shift+C"))
        self.sidebar_action.toggled.connect(self.set_sidebar_visible)
        self.panel_action = QAction("&Settings panel", self, checkable=True)
        self.panel_action.setShortcut(QKeySequence("Ctrl+Shift+P"))
        self.panel_action.toggled.connect(self.set_panel_visible)
        view_menu.addAction(self.sidebar_action)
        view_menu.addAction(self.panel_action)
        view_menu.addSeparator()
        view_menu.addAction("Zoom &in", QKeySequence.StandardKey.ZoomIn, lambda: self.set_zoom(self.settings.zoom + 1))
        view_menu.addAction("Zoom &out", QKeySequence.StandardKey.ZoomOut,
                            lambda: self.set_zoom(self.settings.zoom - 1))
        view_menu.addAction("&Actual size", QKeySequence("Ctrl+0"), lambda: self.set_zoom(0))
        view_menu.addSeparator()
        self.verdicts_action = QAction("Show &verdicts inline", self, checkable=True)
        self.verdicts_action.setShortcut(QKeySequence("Ctrl+Shift+V"))
        self.verdicts_action.setToolTip("The raw text with every token's fate inline, rejected drafts struck through")
        self.verdicts_action.setChecked(self.settings.show_verdicts)
        self.verdicts_action.toggled.connect(self.set_show_verdicts)
        view_menu.addAction(self.verdicts_action)
        self.hide_rejected_action = QAction("&Hide rejected tokens", self, checkable=True)
        self.hide_rejected_action.setChecked(self.settings.hide_rejected)
        self.hide_rejected_action.toggled.connect(self.set_hide_rejected)
        view_menu.addAction(self.hide_rejected_action)
        theme_menu = view_menu.addMenu("&Theme")
        group = QActionGroup(self)
        for theme in ("system", "light", "dark"):
            action = QAction(theme.capitalize(), self, checkable=True)
            action.setChecked(theme == self.settings.theme)
            action.triggered.connect(lambda _=False, t=theme: self.set_theme(t))
            group.addAction(action)
            theme_menu.addAction(action)
        apply_theme(self.settings.theme)
        self._base_point_size = self.chat_view.font().pointSizeF()
        self.set_zoom(self.settings.zoom)
        help_menu = self.menuBar().addMenu("&Help")
        help_menu.addAction("&About specchat", self.show_about)

        self.esc = QShortcut(QKeySequence(Qt.Key.Key_Escape), self)
        self.esc.setContext(Qt.ShortcutContext.WindowShortcut)

    def _connect(self) -> None:
        w = self.host.worker
        w.load_progress.connect(self._on_load_progress)
        w.loaded.connect(self._on_loaded)
        w.load_failed.connect(self._on_load_failed)
        w.events.connect(self.chat.on_events)
        w.prompt_progress.connect(self._on_prompt_progress)
        w.failed.connect(self.chat.on_failed)
        self.chat.transcript_replaced.connect(self._on_transcript_replaced)
        self.chat.message_appended.connect(self._on_message_appended)
        self.chat.events_folded.connect(self._on_events_folded)
        self.chat.reply_finished.connect(self._on_reply_finished)
        self.chat.conversations_changed.connect(self.refresh_conversations)
        self.chat.notice.connect(self.show_error)
        self.chat.status.connect(lambda text: self.statusBar().showMessage(text, 8000))
        self.chat.composer_text.connect(self._on_composer_text)
        w.baseline_measured.connect(self._on_baseline)
        self.composer.send_requested.connect(self.send)
        self.composer.stop_requested.connect(self.stop)
        self.send_button.clicked.connect(self.composer.send)
        self.stop_button.clicked.connect(self.stop)
        self.esc.activated.connect(self.stop)
        self.regenerate_button.clicked.connect(self.regenerate)
        self.chat_view.regenerate_requested.connect(self.regenerate)
        self.chat_view.edit_requested.connect(self.edit_message)
        self.chat_view.version_requested.connect(self.chat.switch_version)
        self.chat_view.race_requested.connect(self.race_reply)
        self.chat_view.continue_requested.connect(self.continue_reply)
        self.races.ready.connect(self.show_race)
        self.races.notice.connect(self.show_error)
        self.races.started.connect(lambda: self.statusBar().showMessage("Racing plain decoding…"))
        self.races.ended.connect(self.statusBar().clearMessage)
        self.races.ended.connect(self._update_actions)
        self.controls.depth_changed.connect(self.depth_control.set)
        self.stats.measure_requested.connect(self.measure_baseline)
        self.controls.load_setting_changed.connect(self._load_setting_changed)
        self.lookup_memory = LookupMemoryKeeper(self.store.path, self)  # off the GUI thread
        self.lookup_memory.ready.connect(self.host.set_lookup_memory)
        self.controls.lookup_memory_changed.connect(self.lookup_memory.set_enabled)
        self.reply_finished.connect(lambda _finished: self.lookup_memory.remember(
            [m.content for m in self.chat.transcript.messages[-2:] if m.content]))
        self.lookup_memory.set_enabled(self.settings.lookup_memory)
        self.welcome.demo_requested.connect(self.load_demo)
        self.welcome.picker_requested.connect(self.open_model_picker)
        self.sidebar.new_requested.connect(self.new_conversation)
        self.sidebar.selected.connect(self.open_conversation)
        self.sidebar.rename_requested.connect(self.chat.rename)
        self.sidebar.delete_requested.connect(self.confirm_delete)

    # -- models ------------------------------------------------------------------------

    def load_models(self, target: str | Path, draft: str | Path | None = None) -> None:
        """Load a pair on the engine thread; progress shows in the status bar."""
        if self.streaming:
            self.show_error("stop the reply before loading other models")
            return
        self._start_loading(f"Loading {Path(target).name}…")
        self._last_load = lambda: self.load_models(target, draft)
        self.host.load(str(target), str(draft or ""), self._load_options())

    def show_about(self) -> QMessageBox:
        """The version and what this llama.cpp build can do (GPU offload, devices): the first thing to check."""
        box = QMessageBox(self)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.setWindowTitle("About specchat")
        box.setIcon(QMessageBox.Icon.Information)
        box.setText(f"<b>specchat {__version__}</b><br>Local speculative decoding on llama.cpp.")
        lines = self.llama_build.lines() if self.llama_build else ["llama.cpp build: not reported", ""]
        box.setInformativeText("<br>".join(html.escape(line) for line in lines[:-1]))
        box.setDetailedText("\n".join(lines))
        box.setStandardButtons(QMessageBox.StandardButton.Ok)
        box.setModal(True)
        box.show()
        return box

    def reload_models(self) -> None:
        """Load the last pair again (loaded or not), to apply a new context size or GPU-layer setting."""
        if self._last_load is not None and not self.loading and not self.streaming:
            self._last_load()

    def _load_setting_changed(self) -> None:
        if self.model_info is not None and not self.loading:
            self.statusBar().showMessage("Context size and GPU layers apply on the next load (File → Reload models, "
                                         "Ctrl+R)", 8000)

    def load_demo(self) -> None:
        if self.streaming:
            return
        self._start_loading("Preparing the offline demo pair…")
        self._last_load = self.load_demo
        self.host.load_demo(self._load_options())

    def open_model_picker(self) -> ModelPickerDialog:
        memory = machine_memory()
        if self.model_info is not None and self.model_info.gpu_bytes:
            # The loaded pair is closed before the next load: its GPU memory is free for the new one.
            memory = dataclasses.replace(memory, gpu_free=memory.gpu_free + self.model_info.gpu_bytes)
        if self.remote_servers:  # the target's layers go there: as much as the latest Test found free
            free = saved_free()
            memory = dataclasses.replace(memory, remote_free=sum(free.get(s, 0) for s in self.remote_servers))
        dialog = ModelPickerDialog(self.settings.last_target, self.settings.last_draft, self,
                                   n_ctx=self.controls.context_size.value(), memory=memory)
        dialog.load_requested.connect(self.load_models)
        dialog.advice_chosen.connect(self.use_advice)
        dialog.demo_requested.connect(self.load_demo)
        dialog.setModal(True)
        dialog.show()
        return dialog

    def open_draft_finder(self) -> DraftFinderDialog | None:
        """The draft finder for the loaded (or last) target; "Use this" loads its pick with its depth."""
        target = self.model_info.target_path if self.model_info is not None else self.settings.last_target
        if not target or not Path(target).is_file():
            self.show_error("choose a target model first (File → Choose models…), then find its best draft")
            return None
        loaded = self.model_info.draft_path if self.model_info is not None else ""
        dialog = DraftFinderDialog(target, self, loaded_draft=loaded or "", composite=self.model_info is not None)
        dialog.use_requested.connect(self.use_advice)
        dialog.setModal(True)
        dialog.show()
        return dialog

    def use_advice(self, target: str, draft: str, drafter: str, depth: int) -> None:
        """Use the draft finder's pick: its drafter at its best fixed depth, on its pair (loaded first unless it
        is the loaded one). It holds for that pair: "Undo" in the status bar, or loading another pair, brings
        back the drafter, depth and Auto set before, and the saved settings keep those (:meth:`save_settings`)."""
        if self.streaming:
            self.show_error("stop the reply before using the draft finder's choice")
            return
        pick = DrafterSetup(target, draft, DrafterKind(drafter), depth, auto=False)
        before = self._advice.before if self._advice is not None else self._drafter_setup()
        self._advice = FinderChoice(before, pick)
        self.undo_advice_button.show()
        self._set_up(pick)

    def undo_advice(self) -> None:
        """Bring back the pair, drafter, depth and Auto from before the draft finder's choice."""
        if self._advice is None or self.streaming or self.loading:
            return
        before, self._advice = self._advice.before, None
        self.undo_advice_button.hide()
        self._set_up(before)

    def _drafter_setup(self) -> DrafterSetup:
        info = self.model_info
        return DrafterSetup.of(self.controls, info.target_path if info else "", info.draft_path if info else "")

    def _set_up(self, setup: DrafterSetup) -> None:
        """``setup`` now if its pair is the loaded one, else once its pair has loaded."""
        info = self.model_info
        if not setup.target or (info is not None and setup.same_pair(info.target_path, info.draft_path)):
            self._setup_on_load = None
            setup.apply(self.controls)
            self.statusBar().showMessage(f"Drafting with {setup.describe(self.controls)}", 8000)
        else:
            self._setup_on_load = setup
            self.load_models(setup.target, setup.draft or None)

    def _advice_pair_loaded(self, info: ModelInfo) -> None:
        """Apply a pick (or its undo) waiting for this pair; a finder's pick ends when another pair loads."""
        waiting, self._setup_on_load = self._setup_on_load, None
        if waiting is not None and waiting.same_pair(info.target_path, info.draft_path):
            waiting.apply(self.controls)
            self.statusBar().showMessage(f"Drafting with {waiting.describe(self.controls)}", 8000)
            return
        choice = self._advice
        if choice is None or choice.applied.same_pair(info.target_path, info.draft_path):
            return
        self._advice = None
        self.undo_advice_button.hide()
        if choice.applied.same_settings(self._drafter_setup()):  # not changed by hand since
            choice.before.apply(self.controls)
            self.controls.set_available_drafters(bool(info.draft_name), info.has_mtp)
            self.statusBar().showMessage(f"The draft finder's choice was for another pair: back to "
                                         f"{choice.before.describe(self.controls)}", 8000)

    def measure_baseline(self) -> None:
        """Time plain decoding on the loaded pair under the current settings (queued behind any reply)."""
        if self.model_info is not None:
            key, sampler = self._baseline_key()
            self._measuring = key
            self.stats.measure_button.setEnabled(False)
            self.statusBar().showMessage("Measuring plain decoding…")
            self.host.measure_baseline(key, sampler)

    def _baseline_key(self) -> tuple[str, SamplerParams]:
        assert self.model_info is not None
        sampler = self.controls.generation_params().sampler
        s = self.settings
        return baseline_key(self.model_info.pair_key, sampler, self.model_info.n_ctx,
                            f"{s.target_gpu_layers}/{s.draft_gpu_layers}"), sampler

    def _current_baseline(self) -> Baseline | None:
        """The baseline for the loaded pair under the current settings, if one was measured."""
        if self.model_info is None:
            return None
        key, _ = self._baseline_key()
        found = Baseline.from_json(self.settings.baselines.get(key))
        return found if found is not None and found.key == key else None

    def _check_baseline(self) -> None:
        """Show the baseline for the current settings, measuring it first if there is none."""
        baseline = self._current_baseline()
        self.stats.set_baseline(baseline)
        if baseline is None and self.model_info is not None and not self._measuring and not self.streaming:
            self.measure_baseline()

    def _start_loading(self, message: str) -> None:
        self.hide_error()
        self.loading = True
        self.welcome.set_busy(True)
        self.welcome.status.setText(message)
        self.statusBar().showMessage(message)
        self.progress.setValue(0)
        self.progress.show()
        self._update_actions()

    def _load_options(self) -> LoadOptions:
        self.controls.store_settings(self.settings)
        s = self.settings
        return LoadOptions(s.n_ctx, s.target_gpu_layers, s.draft_gpu_layers, rpc_servers=tuple(self.remote_servers))

    def _on_load_progress(self, stage: str, fraction: float) -> None:
        self.progress.setValue(int(fraction * 100))
        self.progress.setFormat(f"{stage} %p%")

    def _on_loaded(self, info: ModelInfo) -> None:
        if self._closing:
            return
        self.loading = False
        self.model_info = info
        self.progress.hide()
        self.welcome.set_busy(False)
        self.settings.last_target, self.settings.last_draft = info.target_path, info.draft_path
        draft = info.draft_name or ("its own MTP heads" if info.has_mtp else "no draft")
        self.model_label.setText(f"<b>Target</b> {info.target_name}<br><b>Draft</b> {draft}")
        self.statusBar().showMessage("Models loaded", 5000)
        self.stats.set_placement(info.target_placement, info.draft_placement)
        self.stats.set_context_size(info.n_ctx)
        self.chat.has_draft_model = bool(info.draft_name)
        self.chat.has_mtp = info.has_mtp
        self.controls.set_available_drafters(bool(info.draft_name), info.has_mtp)
        self.stack.setCurrentIndex(1)
        self._update_actions()
        self.composer.setFocus()
        self._measuring = ""
        self._check_baseline()  # a short calibration right after loading, before any reply
        self.models_loaded.emit(info)
        pending, self._send_after_load = self._send_after_load, ""
        if pending:
            self.send(pending)

    def _on_load_failed(self, message: str) -> None:
        if self._closing:
            return
        # The worker let go of the old pair before trying: nothing is loaded now.
        self.model_info = None
        self.model_label.setText("No models loaded")
        self.stats.clear_placement()
        self.loading = False
        self.progress.hide()
        self.welcome.set_busy(False)
        self.welcome.status.setText(message)
        self._update_actions()
        self.show_error(message)
        pending, self._send_after_load = self._send_after_load, ""
        if pending and not self.composer.toPlainText().strip():
            self.composer.setPlainText(pending)

    def _remember_probe(self, finished: Finished) -> None:
        """Plain decoding timed after this reply is the newest baseline: the next reply's "so far" uses it."""
        stats = finished.stats
        if self.model_info is not None and stats.plain_tokens > 0:
            key, _ = self._baseline_key()
            baseline = Baseline(key, stats.plain_tokens_per_second, stats.plain_tokens, time.time())
            self.settings.baselines = remember(self.settings.baselines, baseline)  # _check_baseline shows it

    def _on_baseline(self, baseline: Baseline) -> None:
        if self._closing:
            return
        self._measuring = ""
        self.settings.baselines = remember(self.settings.baselines, baseline)
        self._update_actions()
        self.statusBar().showMessage(f"Plain decoding: {baseline.tokens_per_second:.1f} tokens/s", 5000)
        self.stats.set_baseline(self._current_baseline())
        self.baseline_measured.emit(baseline.tokens_per_second)

    # -- conversations -----------------------------------------------------------------

    @property
    def conversation_id(self) -> int | None:
        return self.chat.conversation_id

    @property
    def transcript(self) -> Transcript:
        return self.chat.transcript

    @property
    def streaming(self) -> bool:
        return self.chat.streaming

    def refresh_conversations(self) -> None:
        self.settings.last_conversation = self.chat.conversation_id or 0  # reopened on the next start
        try:
            conversations = self.store.conversations()
        except sqlite3.Error as exc:
            self.show_error(f"the conversations could not be listed: {exc}")
            return
        self.sidebar.set_conversations(conversations, self.chat.conversation_id)
        title = next((c.title for c in conversations if c.id == self.chat.conversation_id), "")
        self.setWindowTitle(f"{title} — specchat" if title.strip() else "specchat")  # the open conversation's

    def new_conversation(self) -> None:
        self.chat.new_conversation()

    def open_conversation(self, conversation_id: int) -> None:
        """Show a stored conversation with its highlighting."""
        self.chat.open_conversation(conversation_id)

    def delete_conversation(self, conversation_id: int) -> None:
        self.chat.delete_conversation(conversation_id)

    def edit_system_prompt(self) -> SystemPromptDialog:
        """Edit the open conversation's system prompt (the dialog is returned for tests)."""
        dialog = SystemPromptDialog(
            "System prompt", "Sent before the conversation with every reply from now on; stored with this "
            "conversation.", self.chat.transcript.system_prompt, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

        def save() -> None:
            self.chat.set_system_prompt(dialog.text())
            self._update_system_prompt_chip()

        dialog.accepted.connect(save)
        dialog.open()
        return dialog

    def _update_system_prompt_chip(self) -> None:
        """"System prompt: <first words>…" above the chat while the open conversation has one."""
        prompt = self.chat.transcript.system_prompt.strip()
        self.system_prompt_chip.setVisible(bool(prompt))
        if prompt:
            words = prompt.split()
            head = " ".join(words[:8])
            if len(head) > 60:
                head = head[:60].rstrip()
            more = "\u2026" if head != " ".join(words) else ""
            self.system_prompt_chip.setText(f"System prompt: {head}{more}")
            self.system_prompt_chip.setToolTip(f"{prompt[:500]}\n\nClick to edit this conversation's system prompt")

    def edit_remote_devices(self) -> RemoteDevicesDialog:
        """Edit the servers that hold the target's layers (the dialog is returned for tests)."""
        from specchat.core.runtime.remote import probe_servers, rpc_available

        dialog = RemoteDevicesDialog(self.remote_servers, probe_servers, available=rpc_available(), parent=self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self.set_remote_servers(dialog.servers(), dialog.free))
        dialog.open()
        return dialog

    def set_remote_servers(self, servers: list[str], free: dict[str, int] | None = None) -> None:
        """Keep the server list (and what a Test found free on them); it applies on the next load."""
        changed = tuple(servers) != tuple(self.remote_servers)
        self.remote_servers = tuple(servers)
        try:
            save_servers(self.remote_servers, free=free)
        except OSError as exc:
            self.statusBar().showMessage(f"could not save the remote servers: {exc.strerror or exc}", 8000)
            return
        if not changed:
            return
        where = "the remote devices" if servers else "this machine alone"
        self.statusBar().showMessage(f"The target runs on {where} from the next load (File → Reload models)", 8000)

    def edit_default_system_prompt(self) -> SystemPromptDialog:
        """Edit the system prompt new conversations start with."""
        dialog = SystemPromptDialog(
            "Default system prompt", "New conversations start with this system prompt (empty: none).",
            self.settings.system_prompt, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

        def apply() -> None:
            self.settings.system_prompt = self.chat.default_system_prompt = dialog.text()

        dialog.accepted.connect(apply)
        dialog.open()
        return dialog

    def switch_version(self, step: int) -> None:
        """Flip the last reply (or the message with several versions closest to the end) to another version."""
        msgs = self.chat.transcript.messages
        index = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].versions > 1), None)
        if index is not None:
            self.chat.switch_version(index, step)

    def confirm_delete(self, conversation_id: int) -> QMessageBox:
        """Ask before deleting a conversation (the box is returned for tests)."""
        try:
            title = self.store.conversation(conversation_id).title
        except (sqlite3.Error, SpecchatError):
            title = "this conversation"
        box = QMessageBox(QMessageBox.Icon.Question, "Delete conversation",
                          f"Delete \u201c{title}\u201d and all its messages? This cannot be undone.",
                          QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, self)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.accepted.connect(lambda: self.delete_conversation(conversation_id))
        box.open()
        return box

    def _reopen_last_conversation(self) -> None:
        """On start, show the conversation that was open last, readable without any model loaded."""
        last = self.settings.last_conversation
        try:
            known = last and any(c.id == last for c in self.store.conversations())
        except sqlite3.Error:
            known = False
        if known:
            self.chat.open_conversation(last)

    def export_conversation(self, kind: str, path: str | None = None) -> None:
        cid = self.chat.conversation_id
        if cid is None:
            return
        try:
            if path is None:
                title = self.store.conversation(cid).title
                suggested = "".join(c if c.isalnum() or c in " -_" else "_" for c in title).strip() or "conversation"
                pattern = "Markdown (*.md)" if kind == "md" else "JSON (*.json)"
                path, _ = QFileDialog.getSaveFileName(self, "Export conversation", f"{suggested}.{kind}", pattern)
                if not path:
                    return
            text = self.store.export_markdown(cid) if kind == "md" else self.store.export_json(cid)
            Path(path).write_text(text, encoding="utf-8")
        except (OSError, sqlite3.Error, SpecchatError) as exc:
            self.show_error(f"could not export: {exc}")
            return
        self.statusBar().showMessage(f"Exported to {path}", 5000)

    # -- replies -----------------------------------------------------------------------

    def send(self, text: str) -> None:
        """Send a user message and stream the reply."""
        if not text.strip() or self.streaming:
            return
        if self.model_info is None:
            if self._can_load_last_pair() and not self.loading:
                self._send_after_load = text.strip()  # lazily load the last pair, then send
                self.composer.clear()
                self._load_last_pair()
            elif not self.loading:
                self.show_error("load a model first")
            return
        if self.chat.send(text):
            self.composer.clear()

    def _can_load_last_pair(self) -> bool:
        """Nothing was loaded yet this session and the pair used last time is still there."""
        s = self.settings
        return self._last_load is None and bool(s.last_target) and Path(s.last_target).is_file()

    def _load_last_pair(self) -> None:
        self.load_models(self.settings.last_target, self.settings.last_draft or None)

    def regenerate(self) -> None:
        """Generate the last reply again; the old one stays stored until the new one's first round."""
        if self.model_info is not None:
            self.chat.regenerate()

    def continue_reply(self) -> None:
        """Go on with the last reply where the token limit cut it (speculatively, into the same message)."""
        if self.model_info is None:
            self.show_error("load a model to continue the reply")
        elif self.chat.continue_reply():
            self.hide_error()

    def race_refusal(self, index: int | None) -> str:
        """Why the reply at ``index`` cannot be raced (or its race replayed) now; "" when it can."""
        msgs = self.chat.transcript.messages
        if index is None or not 0 <= index < len(msgs):
            return "no reply to race"
        message = msgs[index]
        if RaceRecord.from_dict(message.figures.race if message.figures else None) is not None:
            return ""  # a stored race replays without the engine
        if self.chat.streaming_here:
            return "wait for the reply to finish"
        refusal = race_refusal(message)
        if not refusal and self.model_info is None:
            refusal = "load the pair to race plain decoding"
        return refusal or ("a race is already running" if self.races.running else "")

    def race_reply(self, index: int) -> None:
        """Race plain decoding on the reply at ``index`` (on the engine thread), or replay its stored race."""
        refusal = self.race_refusal(index)
        if refusal:
            self.show_error(refusal)
            return
        if self.races.race(self.chat.transcript.messages[index], self.chat.transcript.history(index)):
            self._update_actions()

    def race_last_reply(self) -> None:
        index = self._last_reply_index()
        if index is not None:
            self.race_reply(index)

    def _last_reply_index(self) -> int | None:
        msgs = self.chat.transcript.messages
        return next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].role == "assistant"), None)

    def show_race(self, message: Message, record: RaceRecord) -> RacePanel:
        """Open the race panel on ``message``'s race and replay it (the panel is returned for tests)."""
        if self.race_panel is not None:
            self.race_panel.close()
            self.race_panel.deleteLater()
        self.race_panel = RacePanel(message, record, parent=self)
        self.race_panel.show()
        self.race_panel.start()
        return self.race_panel

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

    def _reply_settings(self) -> ReplySettings:
        return ReplySettings(self.controls.generation_params(), self.controls.drafter_kind, self.controls.chosen_depth)

    def _on_transcript_replaced(self) -> None:
        if self.chat.conversation_id is not None:
            self.stack.setCurrentIndex(1)  # old chats are readable before any model loads
        self.chat_view.show_transcript(self.chat.transcript)
        self._update_system_prompt_chip()
        self.stats.set_transcript(self.chat.transcript)
        reply = next((m for m in reversed(self.chat.transcript.messages) if m.role == "assistant"), None)
        if reply is not None and not reply.finished and reply.figures is not None and self.chat.streaming_here:
            self._follow_reply(reply.figures)  # shown again mid-reply, or continued: its figures stay live
        else:
            self.stats.show_stored(reply.figures if reply is not None and reply.figures else ReplyFigures())
        self._update_actions()

    def _follow_reply(self, figures: ReplyFigures) -> None:
        """The panel follows a streaming reply; until its first round, "Reading the prompt…"."""
        self.stats.set_baseline(self._current_baseline())
        self.stats.set_auto_drafting(self.controls.drafter_kind is not DrafterKind.NONE
                                     and self.controls.chosen_depth is None)
        self.stats.follow(figures)
        carried = figures.carried  # a continuation: the rounds before it were the reply's first part
        if figures.generated == (carried.generated if carried is not None else 0):
            self.progress.setRange(0, 0)  # busy until the first token
            self.progress.setFormat("")
            self.progress.show()
            self.statusBar().showMessage("Reading the prompt…")

    def _on_message_appended(self) -> None:
        self.chat_view.append_message()
        self.stats.set_transcript(self.chat.transcript)
        reply = self.chat.transcript.reply
        if reply is not None and not reply.finished and reply.figures is not None:
            self.hide_error()
            self._follow_reply(reply.figures)
            self._update_actions()

    def _on_events_folded(self, batch: list[Event]) -> None:
        self.events_received.emit(batch)
        self.chat_view.feed(batch)
        self.stats.refresh()
        reply = self.chat.transcript.reply
        if reply is not None and reply.figures is not None:
            if reply.figures.passes:
                self._hide_busy_indicator()
            if reply.figures.passes or any(isinstance(e, Drafted) for e in batch):
                self.controls.show_live_depth(reply.figures.depth)  # not a reply that failed before any round

    def _on_prompt_progress(self, done: int, total: int) -> None:
        """A long prompt is being read: how many tokens of how many, in the status bar and its bar (Esc stops)."""
        if not self.streaming or total <= 0:
            return
        percent = min(100, done * 100 // total)
        self._reading_prompt = True
        self.progress.setRange(0, 100)
        self.progress.setValue(percent)
        self.progress.setFormat(f"prompt {percent}%")
        self.progress.show()
        self.statusBar().showMessage(f"Reading the prompt: {done:,} of {total:,} tokens ({percent}%), Esc stops")

    def _hide_busy_indicator(self) -> None:
        if self.progress.maximum() == 0 or self._reading_prompt:
            self._reading_prompt = False
            self.progress.hide()
            self.progress.setRange(0, 100)
            self.statusBar().clearMessage()

    def _on_reply_finished(self, finished: Finished) -> None:
        self._hide_busy_indicator()
        self.chat_view.flush()
        self._remember_probe(finished)
        self.stats.refresh()
        self._check_baseline()
        self._update_actions()
        self.reply_finished.emit(finished)

    def _on_composer_text(self, text: str, replace: bool) -> None:
        if replace or not self.composer.toPlainText().strip():
            self.composer.setPlainText(text)

    def _update_actions(self) -> None:
        """Enable what can act now: a loaded pair, no load running, no reply streaming."""
        loaded = self.model_info is not None
        ready = loaded and not self.loading and not self.streaming
        self.composer.setEnabled(not self.loading and (loaded or self._can_load_last_pair()))
        self.send_button.setEnabled(ready or (not loaded and not self.loading and self._can_load_last_pair()))
        self.regenerate_button.setEnabled(ready and self.chat.can_regenerate())
        self.stop_button.setEnabled(self.chat.streaming_here)
        self.stats.measure_button.setEnabled(ready and not self._measuring)
        self.reload_action.setEnabled(self._last_load is not None and not self.loading and not self.streaming)
        self.continue_action.setEnabled(ready and self.chat.can_continue())
        why = self.race_refusal(self._last_reply_index())
        self.race_action.setEnabled(not why)
        self.race_action.setToolTip(why or "Decode the last reply's prompt with the target alone and "
                                    "replay both streams side by side (or replay the stored race)")

    # -- view settings -------------------------------------------------------------------

    def set_hide_rejected(self, hide: bool) -> None:
        self.settings.hide_rejected = hide
        self.chat_view.set_hide_rejected(hide)

    def set_show_verdicts(self, show: bool) -> None:
        """The chat view's verdict view (raw text, every fate inline) or its reading view (rendered Markdown)."""
        self.settings.show_verdicts = show
        self.chat_view.set_show_verdicts(show)

    def set_theme(self, theme: str) -> None:
        self.settings.theme = theme
        apply_theme(theme)

    def set_zoom(self, steps: int) -> None:
        """Text size of the chat and the composer, one point a step (Ctrl+plus/minus, Ctrl+0)."""
        self.settings.zoom = clamp_zoom(steps)
        size = max(6.0, self._base_point_size + self.settings.zoom)
        for widget in (self.chat_view, self.composer):
            font = widget.font()
            font.setPointSizeF(size)
            widget.setFont(font)

    def set_sidebar_visible(self, visible: bool) -> None:
        self.settings.sidebar_visible = visible
        self.sidebar.setVisible(visible)
        if self.sidebar_action.isChecked() != visible:
            self.sidebar_action.setChecked(visible)

    def set_panel_visible(self, visible: bool) -> None:
        self.settings.panel_visible = visible
        self.panel.setVisible(visible)
        if self.panel_action.isChecked() != visible:
            self.panel_action.setChecked(visible)

    def show_error(self, message: str) -> None:
        self.last_error = message
        self.banner.setText(message)
        self.banner.show()
        self.error_shown.emit(message)

    def hide_error(self) -> None:
        self.banner.hide()

    # -- lifecycle -------------------------------------------------------------------------

    def _restore_window(self) -> None:
        s = self.settings
        if s.window_geometry:
            self.restoreGeometry(QByteArray.fromBase64(s.window_geometry.encode()))
        if s.splitter_state:
            self.splitter.restoreState(QByteArray.fromBase64(s.splitter_state.encode()))
        self.sidebar_action.setChecked(s.sidebar_visible)
        self.panel_action.setChecked(s.panel_visible)
        self.set_sidebar_visible(s.sidebar_visible)
        self.set_panel_visible(s.panel_visible)

    def save_settings(self) -> None:
        s = self.settings
        self.controls.store_settings(s)
        if self._advice is not None and self._advice.applied.same_settings(self._drafter_setup()):
            before = self._advice.before  # the finder's pick holds for its pair in this run; yours is kept
            s.drafter, s.depth = before.drafter, None if before.auto else before.depth
        s.window_geometry = bytes(self.saveGeometry().toBase64().data()).decode()
        s.splitter_state = bytes(self.splitter.saveState().toBase64().data()).decode()
        try:
            save_settings(s)
        except OSError as exc:
            log.warning("could not save settings: %s", exc)

    def closeEvent(self, event: QCloseEvent) -> None:
        """Cancel any reply, join the engine thread, save settings; no hang, no traceback."""
        if not self._closing:
            self._closing = True
            self.stop()
            self.host.shutdown()
            self.chat.close()
            self.lookup_memory.close()
            self.chat_view.flush()
            self.save_settings()
        super().closeEvent(event)

