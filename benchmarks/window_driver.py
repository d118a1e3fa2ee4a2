"""The real window, offscreen, on the demo pair: opened, loaded and calibrated, a reply awaited, its race run.

For the benchmarks that measure what the window shows (window_speed.py, attachment_window.py). Import it after
setting ``QT_QPA_PLATFORM``; :func:`open_window` points the settings and caches at a folder of their own.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PySide6.QtCore import SignalInstance
    from PySide6.QtWidgets import QApplication

    from specchat.core.chat.race_record import RaceRecord
    from specchat.core.chat.store import ConversationStore
    from specchat.core.chat.transcript import Message
    from specchat.ui.main_window import MainWindow


@dataclass
class OpenWindow:
    """The application (held for the run), the window on the demo pair and its conversation store."""

    app: QApplication
    window: MainWindow
    store: ConversationStore

    def close(self) -> None:
        self.window.close()
        self.store.close()


@dataclass
class WindowReply:
    """A finished reply as the window shows it: its rate, the panel's speed-up (None when it shows none)."""

    message: Message
    tokens_per_second: float
    panel: float | None
    panel_text: str


def wait_for(signal: SignalInstance, timeout_s: float = 600) -> list[object]:
    """Run the event loop until ``signal`` is emitted; its arguments. Exits the benchmark on a timeout."""
    from PySide6.QtCore import QEventLoop, QTimer

    got: list[object] = []
    loop = QEventLoop()

    def caught(*values: object) -> None:
        got.extend(values)
        loop.quit()

    signal.connect(caught)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    loop.exec()
    signal.disconnect(caught)
    if not got:
        raise SystemExit(f"timed out waiting for {signal}")
    return got


def open_window(max_tokens: int, folder: str) -> OpenWindow:
    """The window with its default settings but ``max_tokens``, the demo pair loaded and its baseline measured.

    Settings, caches and conversations live under ``folder`` (the user's own are not touched).
    """
    for name in ("CONFIG", "CACHE"):
        os.environ.setdefault(f"SPECCHAT_{name}_DIR", os.path.join(folder, name.lower()))
    from PySide6.QtWidgets import QApplication

    from specchat.core.chat.store import ConversationStore
    from specchat.core.models.demo import provision_demo_pair
    from specchat.core.settings import load_settings
    from specchat.ui.main_window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv)
    assert isinstance(app, QApplication)
    pair = provision_demo_pair()
    settings = load_settings()
    settings.max_tokens = max_tokens
    store = ConversationStore(os.path.join(folder, "conversations.sqlite3"))
    window = MainWindow(settings, store)
    window.resize(1280, 860)
    window.show()
    window.load_models(pair.target, pair.draft)
    wait_for(window.models_loaded)
    if window.baselines.measuring:  # the calibration after loading: let it finish before the first reply
        wait_for(window.baselines.measured)
    return OpenWindow(app, window, store)


def send_and_wait(window: MainWindow) -> WindowReply:
    """Send what the composer holds (text and attached files) and wait for the reply to finish."""
    from specchat.core.types import Finished

    window.composer.send()
    (finished,) = wait_for(window.reply_finished)
    assert isinstance(finished, Finished)
    message = window.chat.transcript.messages[-1]
    figures = message.figures
    assert figures is not None and figures.final is not None
    final = figures.final
    rate = final.tokens_per_second
    panel_text = window.stats.speedup.text()
    # The panel's figure is the reply's rate over plain decoding timed right after it; "–" when it shows none.
    panel = rate / final.plain_tokens_per_second if panel_text.startswith("×") else None
    return WindowReply(message, rate, panel, panel_text)


def race_last_reply(window: MainWindow) -> RaceRecord:
    """Race plain decoding on the last reply (Race menu) and return the record; the race panel is closed."""
    from specchat.core.chat.race_record import RaceRecord

    window.racing.race_last()
    _message, record = wait_for(window.races.ready)
    assert isinstance(record, RaceRecord)
    if window.racing.panel is not None:
        window.racing.panel.close()
    return record
