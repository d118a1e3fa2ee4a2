"""Screenshots of the whole window on the real demo pair.

    DISPLAY=:99 python docs/screenshots/window.py      # any X server (Xvfb is fine)

Writes docs/screenshot-reply.png (light theme, a reply that renders Markdown with
its token fates, the stats and the per-round chart), docs/screenshot-dark.png
(the same conversation in the dark theme, verdicts inline) and
docs/screenshot-900x600.png (a 900x600 window). Every folder the app writes to
is a temporary one.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PROMPTS = (
    "Give me a short recipe for roasted carrots, with a list of steps and one tip in bold.",
    "Write a Python function that returns the squares of a list of numbers.",
)


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="specchat-shots-"))
    for name in ("data", "config", "cache"):
        os.environ[f"SPECCHAT_{name.upper()}_DIR"] = str(tmp / name)

    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from specchat.app import llama_build
    from specchat.core.chat.store import ConversationStore
    from specchat.core.models.demo import provision_demo_pair
    from specchat.core.settings import load_settings
    from specchat.ui.main_window import MainWindow

    _app = QApplication(sys.argv[:1])  # kept alive for the whole run
    pair = provision_demo_pair()
    settings = load_settings()
    settings.max_tokens = 160
    store = ConversationStore(tmp / "conversations.sqlite3")
    window = MainWindow(settings, store, build=llama_build())
    window.resize(1280, 860)
    window.show()

    def wait(signal: object, ms: int = 300_000) -> None:
        loop = QEventLoop()
        signal.connect(loop.quit)  # type: ignore[attr-defined]
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def settle(ms: int = 400) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    window.load_models(pair.target, pair.draft)
    wait(window.models_loaded)
    wait(window.baseline_measured)  # the calibration right after loading
    for prompt in PROMPTS:
        window.send(prompt)
        wait(window.reply_finished)
    settle()
    window.grab().save(str(DOCS / "screenshot-reply.png"))

    window.set_theme("dark")
    window.verdicts_action.setChecked(True)
    settle()
    window.grab().save(str(DOCS / "screenshot-dark.png"))

    window.verdicts_action.setChecked(False)
    window.set_theme("light")
    window.resize(900, 600)
    settle()
    window.grab().save(str(DOCS / "screenshot-900x600.png"))
    window.close()
    store.close()
    print("wrote docs/screenshot-reply.png, docs/screenshot-dark.png, docs/screenshot-900x600.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
