"""Plain decoding's speed on the loaded pair, measured and kept per pair and settings (the speed-up's baseline),
and the status bar's note, once per busy spell, when a reply's probe ran well under the pair's quiet rate."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QStatusBar

from specchat.core.chat.baseline import Baseline, baseline_key, remember
from specchat.core.chat.busy import BusyWatch, with_quiet
from specchat.core.settings import Settings
from specchat.core.types import Finished, SamplerParams

from .controls import SpeculationControls
from .stats_panel import StatsPanel
from .worker import ModelInfo, WindowRuntimeHost

BUSY_NOTE_MS = 30_000  # how long the status bar shows that the machine is busy


class BaselineKeeper(QObject):
    """Measures plain decoding (after loading, or on request), remembers each reply's probe, shows the figure;
    says once per busy spell when a probe shows the machine busy (``core/chat/busy.py``)."""

    measured = Signal(float)  # tokens/s of a measurement just finished
    busy_noted = Signal(str)  # the note just shown: a busy spell started

    def __init__(
        self,
        host: WindowRuntimeHost,
        settings: Settings,
        controls: SpeculationControls,
        stats: StatsPanel,
        status: QStatusBar,
        loaded: Callable[[], ModelInfo | None],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.host, self.settings, self.controls, self.stats, self.status = host, settings, controls, stats, status
        self.loaded = loaded
        self.measuring = ""  # the key being measured
        self.closing = False
        self.busy = BusyWatch()
        host.worker.baseline_measured.connect(self._on_measured)

    def measure(self) -> None:
        """Time plain decoding on the loaded pair under the current settings (queued behind any reply)."""
        if self.loaded() is not None:
            key, sampler = self._key()
            self.measuring = key
            self.stats.measure_button.setEnabled(False)
            self.status.showMessage("Measuring plain decoding…")
            self.host.measure_baseline(key, sampler)

    def _key(self) -> tuple[str, SamplerParams]:
        info = self.loaded()
        assert info is not None
        sampler = self.controls.generation_params().sampler
        s = self.settings
        return baseline_key(info.pair_key, sampler, info.n_ctx, f"{s.target_gpu_layers}/{s.draft_gpu_layers}"), sampler

    def current(self) -> Baseline | None:
        """The baseline for the loaded pair under the current settings, if one was measured."""
        if self.loaded() is None:
            return None
        key, _ = self._key()
        found = Baseline.from_json(self.settings.baselines.get(key))
        return found if found is not None and found.key == key else None

    def check(self, busy: bool) -> None:
        """Show the baseline for the current settings, measuring it first if there is none (and nothing runs)."""
        baseline = self.current()
        self.stats.set_baseline(baseline)
        if baseline is None and self.loaded() is not None and not self.measuring and not busy:
            self.measure()

    def remember_probe(self, finished: Finished) -> None:
        """Plain decoding timed after a reply is the newest baseline: the next reply's "so far" uses it.

        Against the pair's quiet rate it also says, once per busy spell, that the machine is busy.
        """
        stats = finished.stats
        if self.loaded() is not None and stats.plain_tokens > 0:
            key, _ = self._key()
            previous = self.current()
            note = self.busy.see(stats.plain_tokens_per_second, previous.quiet[0] if previous is not None else 0.0)
            baseline = Baseline(key, stats.plain_tokens_per_second, stats.plain_tokens, time.time())
            self.settings.baselines = remember(self.settings.baselines, with_quiet(baseline, previous))
            if note is not None:
                self.status.showMessage(note, BUSY_NOTE_MS)
                self.busy_noted.emit(note)

    def _on_measured(self, baseline: Baseline) -> None:
        if self.closing:
            return
        self.measuring = ""
        previous = Baseline.from_json(self.settings.baselines.get(baseline.key))
        self.settings.baselines = remember(self.settings.baselines, with_quiet(baseline, previous))
        self.status.showMessage(f"Plain decoding: {baseline.tokens_per_second:.1f} tokens/s", 5000)
        self.stats.set_baseline(self.current())
        self.measured.emit(baseline.tokens_per_second)
