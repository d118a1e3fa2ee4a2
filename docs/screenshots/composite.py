"""Screenshot of the automatic drafter at work, with the lookup memory setting on.

    DISPLAY=:96 python docs/screenshots/composite.py    # any X server (Xvfb is fine)

Loads the real demo pair, turns "Remember phrasing from saved conversations"
on, has the automatic drafter proofread a note (two replies: the first one
measures the costs) and writes docs/screenshots/composite.png. Every folder
the app writes to is a temporary one.
"""

from __future__ import annotations

import sys
from typing import Any

import shots
from shots import wait

PROMPTS = (
    "Say hello in five words.",
    "Proofread this note and return it in full:\n\nDear team,\n\nThe office will be closed on Friday for "
    "maintenance. Please take your laptops home on Thursday evening and make sure all files are saved to "
    "the shared drive.\n\nThanks,\nFacilities",
)


def main() -> int:
    from specchat.core.types import DrafterKind

    tmp = shots.isolate()
    _app = shots.app()  # kept alive for the whole run

    def configure(settings: Any) -> None:
        settings.max_tokens, settings.drafter, settings.repeat_penalty = 80, DrafterKind.COMPOSITE, 1.0

    window, store = shots.demo_window(tmp, 1100, 720, configure)
    window.controls.lookup_memory.setChecked(True)
    for prompt in PROMPTS:
        window.send(prompt)
        wait(window.reply_finished)
    wait(window.models_loaded, 500)  # nothing loads: the last repaint
    window.grab().save(str(shots.HERE / "composite.png"))
    window.close()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
