"""Screenshots of issue 27's fixes on the real demo pair.

    DISPLAY=:99 python docs/screenshots/rough_edges.py      # any X server (Xvfb is fine)

Writes docs/screenshots/limit-continue.png (light: a reply cut at the token limit
says so and offers Continue; the drafter's name whole), limit-continued-dark.png
(dark: the same reply continued into the same message, the error banner and the
charts in the dark palette) and limit-900x600.png (the window at 900x600). Every
folder the app writes to is a temporary one.
"""

from __future__ import annotations

import sys

import shots
from shots import settle, wait

HERE = shots.HERE
PROMPT = "List the days of the week, one per line, each with one thing people often do that day."


def main() -> int:
    tmp = shots.isolate()
    _app = shots.app()  # kept alive for the whole run

    def configure(settings: object) -> None:
        settings.max_tokens = 40  # type: ignore[attr-defined]
        settings.theme = "light"  # type: ignore[attr-defined]

    window, store = shots.demo_window(tmp, 1280, 860, configure)
    wait(window.baselines.measured)  # the calibration right after loading
    window.send(PROMPT)
    wait(window.reply_finished)
    settle()
    window.grab().save(str(HERE / "limit-continue.png"))

    window.continue_reply()
    wait(window.reply_finished)
    window.look.set_theme("dark")
    window.show_error(
        "the conversation is 5,210 tokens but the context holds 4096; start a new conversation "
        "or raise the context size"
    )
    settle()
    window.grab().save(str(HERE / "limit-continued-dark.png"))

    window.look.set_theme("light")
    window.hide_error()
    window.resize(900, 600)
    settle()
    window.grab().save(str(HERE / "limit-900x600.png"))
    window.close()
    store.close()
    print("wrote docs/screenshots/limit-continue.png, limit-continued-dark.png, limit-900x600.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
