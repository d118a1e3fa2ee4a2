"""Screenshots of File → Serve on localhost…: its dialog with a key, and the window serving two `openai` requests.

    Xvfb :96 & DISPLAY=:96 python docs/screenshots/server_panel.py     # any X server, or
    QT_QPA_PLATFORM=offscreen python docs/screenshots/server_panel.py

The window loads the demo pair (F32 target, Q4_1 draft) and opens the dialog
on a free port with *Require an API key* ticked (a generated ``sk-local-`` key):
docs/screenshots/serve-dialog.png. Serve starts the server; two greedy chat
requests go through the ``openai`` package with that key and the first one's
row is selected: docs/screenshots/server-panel.png (the panel's address line
says the key is required, with Copy URL and Copy key). Both are QWidget.grab()
images. Every folder the app writes to is a temporary one.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

import shots
from shots import HERE, settle

PROMPTS = ("Write a haiku about bicycles.", "List three colours, one per line.")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> int:
    tmp = shots.isolate("specchat-serve-")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    app = shots.app()
    import openai

    window, store = shots.demo_window(tmp, 1400, 820)
    shots.wait(window.baselines.measured)  # the calibration right after loading, before serving
    window.serving.action.trigger()
    dialog = window.serving.dialog
    assert dialog is not None
    dialog.port.setValue(free_port())
    dialog.require_key.setChecked(True)
    settle()
    dialog.grab().save(str(HERE / "serve-dialog.png"))
    key = dialog.key.text()
    dialog.ok.click()
    if not window.serving.serving:
        print(f"not serving: {window.statusBar().currentMessage()}", file=sys.stderr)
        return 1
    api = openai.OpenAI(base_url=window.serving.url, api_key=key, max_retries=0)
    requests = threading.Thread(
        target=lambda: [
            api.chat.completions.create(
                model="m", messages=[{"role": "user", "content": p}], max_tokens=64, temperature=0
            )
            for p in PROMPTS
        ]
    )
    requests.start()
    panel = window.serving.panel
    while requests.is_alive() or len(panel.requests) < len(PROMPTS) or not panel.requests[-1].done:
        settle(50)
    panel.table.selectRow(0)
    settle()
    window.grab().scaled(1120, 656).save(str(HERE / "server-panel.png"))
    api.close()
    window.serving.stop()
    window.close()
    store.close()
    del app
    print(HERE / "serve-dialog.png", HERE / "server-panel.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
