"""Screenshot of automatic drafting over a target's own MTP heads (lookup + heads).

    DISPLAY=:96 python docs/screenshots/composite_heads.py    # any X server (Xvfb is fine)

Loads tests/models/qwen35-mtp.gguf (random weights, one MTP layer: it shows the
drafter names and sources, not a speed), lets the window preselect its drafter,
sends one prompt without a repeat penalty (the random model soon loops, which
lookup drafts) and writes docs/screenshots/composite-heads.png with the drafter
list open: the top of the window only, as the toy model's speed figures (one
pass takes half a millisecond, less than a round's bookkeeping) say nothing
about a real one. Every folder the app writes to is a temporary one.
"""

from __future__ import annotations

import sys
from typing import Any

import shots
from shots import settle, wait

MTP_MODEL = shots.ROOT / "tests" / "models" / "qwen35-mtp.gguf"


def main() -> int:
    tmp = shots.isolate()
    _app = shots.app()  # kept alive for the whole run

    def configure(settings: Any) -> None:
        settings.max_tokens, settings.repeat_penalty = 64, 1.0

    window, store = shots.demo_window(tmp, 1100, 720, configure, load=False)
    window.load_models(MTP_MODEL)
    wait(window.models_loaded)
    window.send("Tell me about the sea.")
    wait(window.reply_finished)
    window.controls.drafter.showPopup()
    settle(800)
    screen = window.screen().grabWindow(0, 0, 0, 1240, 240)  # the open list is a window of its own
    screen.save(str(shots.HERE / "composite-heads.png"))
    window.controls.drafter.hidePopup()
    window.close()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
