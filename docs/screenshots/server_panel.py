"""Screenshot of the window serving its demo pair, two `openai` client requests in the Server panel.

    Xvfb :96 & DISPLAY=:96 python docs/screenshots/server_panel.py     # any X server, or
    QT_QPA_PLATFORM=offscreen python docs/screenshots/server_panel.py

The window loads the demo pair (F32 target, Q4_1 draft), starts File → Serve on
localhost… on a free port, sends two greedy chat requests through the
``openai`` package and selects the first one's row; the window is written to
docs/screenshots/server-panel.png with QWidget.grab(). Every folder the app
writes to is a temporary one.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "screenshots" / "server-panel.png"
PROMPTS = ("Write a haiku about bicycles.", "List three colours, one per line.")


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="specchat-serve-"))
    for name in ("data", "config", "cache"):
        os.environ[f"SPECCHAT_{name.upper()}_DIR"] = str(tmp / name)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    import openai
    from PySide6.QtWidgets import QApplication

    from specchat.core.chat.store import ConversationStore
    from specchat.core.models.demo import provision_demo_pair
    from specchat.core.settings import load_settings
    from specchat.ui.main_window import MainWindow

    app = QApplication(sys.argv[:1])
    store = ConversationStore(tmp / "conversations.sqlite3")
    window = MainWindow(load_settings(), store)
    window.resize(1400, 820)
    window.show()

    def pump(until: object) -> None:
        while not until():  # type: ignore[operator]
            app.processEvents()
            time.sleep(0.02)

    pair = provision_demo_pair(tmp / "models")
    loaded: list[object] = []
    window.models_loaded.connect(lambda *args: loaded.append(args))
    window.load_models(pair.target, pair.draft)
    pump(lambda: loaded)
    url = window.serving.start(0)
    api = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
    requests = threading.Thread(target=lambda: [api.chat.completions.create(
        model="m", messages=[{"role": "user", "content": p}], max_tokens=64, temperature=0) for p in PROMPTS])
    requests.start()
    panel = window.serving.panel
    pump(lambda: not requests.is_alive() and len(panel.requests) == len(PROMPTS) and panel.requests[-1].done)
    panel.table.selectRow(0)
    app.processEvents()
    window.grab().scaled(1120, 656).save(str(OUT))
    api.close()
    window.serving.stop()
    window.close()
    store.close()
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
