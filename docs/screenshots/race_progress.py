"""A screenshot of a race while it runs (the progress dialog over the window), on the real demo pair.

    DISPLAY=:99 python docs/screenshots/race_progress.py      # any X server (Xvfb is fine)

Loads the demo pair, asks for one greedy reply of 192 tokens, starts its race and grabs the screen once a few
blocks have run: docs/screenshots/race-progress.png. Then cancels the race (nothing is stored). Every folder
the app writes to is a temporary one.
"""

from __future__ import annotations

import sys

import shots
from shots import HERE, settle, wait

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def main() -> int:
    tmp = shots.isolate()
    app = shots.app()
    window, _store = shots.demo_window(tmp, 1200, 800, lambda settings: setattr(settings, "max_tokens", 192))
    wait(window.baselines.measured)  # the calibration right after loading, before the engine is free
    window.send(PROMPT)
    wait(window.reply_finished)
    window.racing.race_last()
    dialog = window.racing.progress
    if dialog is None:
        print(f"no race: {window.last_error}", file=sys.stderr)
        return 1
    dialog.move(window.geometry().center() - dialog.rect().center())
    while window.racing.progress is not None and window.racing.progress.bar.value() < 150:
        wait(window.races.progressed)  # a few blocks of each run
    settle(200)
    screen = app.primaryScreen().grabWindow(0)
    screen.save(str(HERE / "race-progress.png"))
    print(dialog.stage.text())
    print(dialog.runs.text())
    dialog.cancel_button.click()
    wait(window.races.cancelled)
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
