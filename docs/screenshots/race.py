"""A screenshot of the race panel on the real demo pair, caught mid-replay.

    DISPLAY=:99 python docs/screenshots/race.py      # any X server (Xvfb is fine)

Loads the demo pair, asks for one greedy reply, races plain decoding on it,
then replays the race and grabs the panel just after the speculative stream
has finished while the plain one is still writing: docs/screenshots/race.png.
Every folder the app writes to is a temporary one.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROMPT = "Write a Python function that returns the squares of a list of numbers."


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
    settings.max_tokens = 96
    store = ConversationStore(tmp / "conversations.sqlite3")
    window = MainWindow(settings, store, build=llama_build())
    window.resize(1200, 800)
    window.show()

    def wait(signal: object, ms: int = 300_000) -> None:
        loop = QEventLoop()
        signal.connect(loop.quit)  # type: ignore[attr-defined]
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def settle(ms: int) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    window.load_models(pair.target, pair.draft)
    wait(window.models_loaded)
    wait(window.baseline_measured)  # the calibration right after loading, before the engine is free
    window.send(PROMPT)
    wait(window.reply_finished)
    window.race_last_reply()
    wait(window.races.ready)
    panel = window.race_panel
    if panel is None:
        print(f"no race: {window.last_error}", file=sys.stderr)
        return 1
    panel.resize(1000, 500)
    panel.start()  # from the beginning, now that the panel has its size
    spec_ms = int(panel.spec_seconds * 1000)
    settle(spec_ms + max(300, (int(panel.record.finish_seconds * 1000) - spec_ms) // 3))
    panel.grab().save(str(HERE / "race.png"))
    print(panel.summary.text())
    print(panel.identity.text())
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
