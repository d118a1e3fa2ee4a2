"""Screenshot of the draft finder on the real demo pair, its draft model loaded.

    Xvfb :97 & DISPLAY=:97 python docs/screenshots/draft_finder.py     # any X server, or
    QT_QPA_PLATFORM=offscreen python docs/screenshots/draft_finder.py

The window loads the demo pair (F32 target, Q4_1 draft) on its runtime thread as
File → Load the offline demo pair does, opens File → Find the best draft…,
runs it with a 40 s budget and selects the loaded draft's row; the dialog is
written to docs/screenshots/draft-finder.png with QWidget.grab(). Every folder
the app writes to is a temporary one (the F32 target is converted there).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "screenshots" / "draft-finder.png"
BUDGET = 40


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="specchat-finder-"))
    for name in ("data", "config", "cache"):
        os.environ[f"SPECCHAT_{name.upper()}_DIR"] = str(tmp / name)
    os.environ["HF_HOME"] = str(tmp / "hf")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from specchat.core.chat.store import ConversationStore
    from specchat.core.settings import load_settings
    from specchat.ui.main_window import MainWindow

    _app = QApplication(sys.argv[:1])  # kept alive for the whole run
    store = ConversationStore(tmp / "conversations.sqlite3")
    window = MainWindow(load_settings(), store)
    window.resize(1280, 860)
    window.show()

    def wait_until(done, seconds: float) -> bool:  # noqa: ANN001 - a callable returning bool
        loop = QEventLoop()
        timer = QTimer()
        timer.timeout.connect(lambda: loop.quit() if done() else None)
        timer.start(100)
        QTimer.singleShot(int(seconds * 1000), loop.quit)
        loop.exec()
        timer.stop()
        return bool(done())

    window.loader.load_demo()
    if not wait_until(lambda: window.model_info is not None, 600):
        print(f"the demo pair did not load: {window.last_error}", file=sys.stderr)
        return 1
    dialog = window.dialogs.draft_finder()
    assert dialog is not None
    dialog.budget.setValue(BUDGET)
    dialog.start()
    if not wait_until(lambda: not dialog.running, BUDGET + 300) or dialog.advice is None:
        print(f"the finder did not finish: {dialog.status.text()}", file=sys.stderr)
        return 1
    labels = [dialog.table.item(row, 0).text() for row in range(dialog.table.rowCount())]
    loaded = next((row for row, label in enumerate(labels) if label.endswith("(loaded)")), None)
    if loaded is None:
        print(f"the loaded draft is not listed: {labels}", file=sys.stderr)
        return 1
    dialog.table.selectRow(loaded)
    dialog.resize(1180, 380)
    wait_until(lambda: False, 0.5)
    dialog.grab().save(str(OUT))
    dialog.close()
    window.close()
    store.close()
    print("\n".join(labels))
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
