"""What the window screenshots share: private app folders, the demo pair in a shown window, waits.

Import it before anything from specchat: :func:`isolate` points every folder the
app writes to at a temporary one, and the app reads those at startup.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
HERE = DOCS / "screenshots"


def isolate(prefix: str = "specchat-shots-") -> Path:
    """A temporary folder holding the app's data, config and cache folders (set in the environment)."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    for name in ("data", "config", "cache"):
        os.environ[f"SPECCHAT_{name.upper()}_DIR"] = str(tmp / name)
    return tmp


def app() -> Any:
    """The QApplication (one per run; keep the reference)."""
    from PySide6.QtWidgets import QApplication

    return QApplication.instance() or QApplication(sys.argv[:1])


def wait(signal: Any, ms: int = 300_000) -> None:
    """Run the event loop until ``signal`` fires (or ``ms`` pass)."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    signal.connect(loop.quit)
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def settle(ms: int = 400) -> None:
    """Run the event loop for ``ms`` milliseconds (repaints, timers)."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def demo_window(
    tmp: Path, width: int, height: int, configure: Callable[[Any], None] = lambda s: None, *, load: bool = True
) -> tuple[Any, Any]:
    """The main window on its own store in ``tmp``, shown at ``width`` x ``height``, with the demo
    pair loaded (unless ``load`` is False); ``configure`` adjusts the settings first. Returns
    ``(window, store)``."""
    from specchat.core.chat.store import ConversationStore
    from specchat.core.models.demo import provision_demo_pair
    from specchat.core.runtime.build import llama_build
    from specchat.core.settings import load_settings
    from specchat.ui.main_window import MainWindow

    pair = provision_demo_pair()
    settings = load_settings()
    configure(settings)
    store = ConversationStore(tmp / "conversations.sqlite3")
    window = MainWindow(settings, store, build=llama_build())
    window.resize(width, height)
    window.move(0, 0)
    window.show()
    if load:
        window.load_models(pair.target, pair.draft)
        wait(window.models_loaded)
    return window, store
