"""Screenshots of the whole window on the real demo pair.

    DISPLAY=:99 python docs/screenshots/window.py      # any X server (Xvfb is fine)

Writes docs/screenshot-reply.png (light theme, a reply that renders Markdown with
its token fates, the stats and the per-round chart), docs/screenshot-dark.png
(the same conversation in the dark theme, verdicts inline) and
docs/screenshot-900x600.png (a 900x600 window). Every folder the app writes to
is a temporary one.
"""

from __future__ import annotations

import sys

import shots
from shots import settle, wait

DOCS = shots.DOCS
PROMPTS = (
    "Give me a short recipe for roasted carrots, with a list of steps and one tip in bold.",
    "Write a Python function that returns the squares of a list of numbers.",
)


def main() -> int:
    tmp = shots.isolate()
    _app = shots.app()  # kept alive for the whole run

    window, store = shots.demo_window(tmp, 1280, 860, lambda settings: setattr(settings, "max_tokens", 160))
    wait(window.baselines.measured)  # the calibration right after loading
    for prompt in PROMPTS:
        window.send(prompt)
        wait(window.reply_finished)
    settle()
    window.grab().save(str(DOCS / "screenshot-reply.png"))

    window.look.set_theme("dark")
    window.look.verdicts_action.setChecked(True)
    settle()
    window.grab().save(str(DOCS / "screenshot-dark.png"))

    window.look.verdicts_action.setChecked(False)
    window.look.set_theme("light")
    window.resize(900, 600)
    settle()
    window.grab().save(str(DOCS / "screenshot-900x600.png"))
    window.close()
    store.close()
    print("wrote docs/screenshot-reply.png, docs/screenshot-dark.png, docs/screenshot-900x600.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
