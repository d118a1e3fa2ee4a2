"""Screenshot of the window replying while it serves two requests in one batch with its reply.

    Xvfb :93 & DISPLAY=:93 python docs/screenshots/window_serves.py     # any X server, or
    QT_QPA_PLATFORM=offscreen python docs/screenshots/window_serves.py

The window loads the demo pair (F32 target, Q4_1 draft), drafts with n-gram
lookup (which joins the served requests' batch), and serves on a free port with
two requests at once. Two long greedy chat requests stream from threads; once
both show text in the Server panel, a message is sent from the window, and the
window is grabbed while its reply and both served requests decode in one batch:
docs/screenshots/window-serves.png (QWidget.grab()). Every folder the app writes
to is a temporary one.
"""

from __future__ import annotations

import os
import sys
import threading

import shots
from shots import HERE, settle

SERVED = ("Tell me a long story about a lighthouse keeper.", "Write a long essay about the history of rivers.")
ASKED = "Write a short poem about the sea."


def main() -> int:
    tmp = shots.isolate("specchat-window-serves-")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    app = shots.app()
    import httpx

    def configure(settings: object) -> None:
        settings.drafter = "ngram"  # type: ignore[attr-defined]  # the Settings dataclass
        settings.max_tokens = 160  # type: ignore[attr-defined]
        settings.temperature = 0.0  # type: ignore[attr-defined]

    window, store = shots.demo_window(tmp, 1600, 900, configure)
    url = window.serving.start(0, parallel=2)
    leave = threading.Event()

    def stream(question: str) -> None:
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": question}],
            "max_tokens": 1500,
            "temperature": 0,
            "stream": True,
            "speculative": {"depth": 2},
        }
        with httpx.Client(timeout=600) as http, http.stream("POST", f"{url}/chat/completions", json=body) as answer:
            for _ in answer.iter_lines():
                if leave.is_set():
                    return

    clients = [threading.Thread(target=stream, args=(q,), daemon=True) for q in SERVED]
    for client in clients:
        client.start()
    panel = window.serving.panel
    while sum(1 for r in panel.requests if r.live and len(r.spans) > 20) < len(SERVED):
        settle(50)
    window.send(ASKED)
    while len(window.transcript.messages[-1].content) < 160:
        settle(50)
    settle(200)
    if sum(1 for r in panel.requests if r.live) < len(SERVED):
        print("a served request ended before the picture", file=sys.stderr)
        return 1
    window.grab().save(str(HERE / "window-serves.png"))
    leave.set()
    window.page.stop_button.click()
    window.serving.stop()
    for client in clients:
        client.join(timeout=60)
    window.close()
    store.close()
    del app
    print(HERE / "window-serves.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
