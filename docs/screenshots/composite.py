"""Screenshot of the automatic drafter at work, with the lookup memory setting on.

    DISPLAY=:96 python docs/screenshots/composite.py    # any X server (Xvfb is fine)

Loads the real demo pair, turns "Remember phrasing from saved conversations"
on, has the automatic drafter proofread a note (two replies: the first one
measures the costs) and writes docs/screenshots/composite.png. Every folder
the app writes to is a temporary one.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

PROMPTS = ("Say hello in five words.",
           "Proofread this note and return it in full:\n\nDear team,\n\nThe office will be closed on Friday for "
           "maintenance. Please take your laptops home on Thursday evening and make sure all files are saved to "
           "the shared drive.\n\nThanks,\nFacilities")


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
    from specchat.core.types import DrafterKind
    from specchat.ui.main_window import MainWindow

    _app = QApplication(sys.argv[:1])  # kept alive for the whole run
    pair = provision_demo_pair()
    settings = load_settings()
    settings.max_tokens, settings.drafter, settings.repeat_penalty = 80, DrafterKind.COMPOSITE, 1.0
    store = ConversationStore(tmp / "conversations.sqlite3")
    window = MainWindow(settings, store, build=llama_build())
    window.resize(1100, 720)
    window.move(0, 0)
    window.show()

    def wait(signal: object, ms: int = 300_000) -> None:
        loop = QEventLoop()
        signal.connect(loop.quit)  # type: ignore[attr-defined]
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    window.load_models(pair.target, pair.draft)
    wait(window.models_loaded)
    window.controls.lookup_memory.setChecked(True)
    for prompt in PROMPTS:
        window.send(prompt)
        wait(window.reply_finished)
    wait(window.models_loaded, 500)  # nothing loads: the last repaint
    window.grab().save(str(Path(__file__).resolve().parent / "composite.png"))
    window.close()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
