"""Loading a pair on the engine thread: the request, its progress, and what the window shows when it ends."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QStatusBar

from specchat.core.settings import Settings, load_servers

from .status_progress import StatusProgress
from .welcome import WelcomeView
from .window_layout import SettingsPanel
from .worker import LoadOptions, ModelInfo, WindowRuntimeHost


class PairLoader(QObject):
    """Loads a pair (files, the demo pair, or the last one again) and keeps what is loaded in ``info``."""

    loaded = Signal(object)  # ModelInfo, once the panel shows it
    failed = Signal(str)  # nothing is loaded now (the old pair was released first)
    notice = Signal(str)  # a load refused: one line for the user
    started = Signal()

    def __init__(
        self,
        host: WindowRuntimeHost,
        settings: Settings,
        panel: SettingsPanel,
        welcome: WelcomeView,
        progress: StatusProgress,
        status: QStatusBar,
        streaming: Callable[[], bool],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.host, self.settings, self.panel, self.welcome = host, settings, panel, welcome
        self.progress, self.status, self.streaming = progress, status, streaming
        self.info: ModelInfo | None = None
        self.loading = False
        self.closing = False
        self.last_load: Callable[[], None] | None = None  # how the last pair was loaded, for Reload
        self.remote_servers: tuple[str, ...] = load_servers()  # where the target's layers go (none: this machine)
        w = host.worker
        w.load_progress.connect(progress.load_stage)
        w.loaded.connect(self._on_loaded)
        w.load_failed.connect(self._on_failed)
        panel.controls.load_setting_changed.connect(self._load_setting_changed)

    def load(self, target: str | Path, draft: str | Path | None = None) -> None:
        """Load a pair on the engine thread; progress shows in the status bar."""
        if self.streaming():
            self.notice.emit("stop the reply before loading other models")
            return
        self._start(f"Loading {Path(target).name}…")
        self.last_load = lambda: self.load(target, draft)
        self.host.load(str(target), str(draft or ""), self.options())

    def load_demo(self) -> None:
        if self.streaming():
            return
        self._start("Preparing the offline demo pair…")
        self.last_load = self.load_demo
        self.host.load_demo(self.options())

    def reload(self) -> None:
        """Load the last pair again (loaded or not), to apply a new context size or GPU-layer setting."""
        if self.last_load is not None and not self.loading and not self.streaming():
            self.last_load()

    def can_load_last_pair(self) -> bool:
        """Nothing was loaded yet this session and the pair used last time is still there."""
        s = self.settings
        return self.last_load is None and bool(s.last_target) and Path(s.last_target).is_file()

    def load_last_pair(self) -> None:
        self.load(self.settings.last_target, self.settings.last_draft or None)

    def options(self) -> LoadOptions:
        """Context size, GPU layers and remote servers as the panel and the settings say now."""
        self.panel.controls.store_settings(self.settings)
        s = self.settings
        return LoadOptions(s.n_ctx, s.target_gpu_layers, s.draft_gpu_layers, rpc_servers=tuple(self.remote_servers))

    def _start(self, message: str) -> None:
        self.loading = True
        self.welcome.set_busy(True)
        self.welcome.status.setText(message)
        self.progress.start_load(message)
        self.started.emit()

    def _load_setting_changed(self) -> None:
        if self.info is not None and not self.loading:
            self.status.showMessage(
                "Context size and GPU layers apply on the next load (File → Reload models, Ctrl+R)", 8000
            )

    def _on_loaded(self, info: ModelInfo) -> None:
        if self.closing:
            return
        self.loading = False
        self.info = info
        self.progress.hide()
        self.welcome.set_busy(False)
        self.settings.last_target, self.settings.last_draft = info.target_path, info.draft_path
        self.panel.show_pair(info.target_name, info.draft_name or ("its own MTP heads" if info.has_mtp else "no draft"))
        self.status.showMessage("Models loaded", 5000)
        self.panel.stats.set_placement(info.target_placement, info.draft_placement)
        self.panel.stats.set_context_size(info.n_ctx)
        self.panel.controls.set_offered(info.offered)
        self.loaded.emit(info)

    def _on_failed(self, message: str) -> None:
        if self.closing:
            return
        self.info = None  # the worker let go of the old pair before trying: nothing is loaded now
        self.panel.show_none()
        self.loading = False
        self.progress.hide()
        self.welcome.set_busy(False)
        self.welcome.status.setText(message)
        self.failed.emit(message)
