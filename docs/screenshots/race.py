"""A screenshot of the race panel on the real demo pair, caught mid-replay.

    DISPLAY=:99 python docs/screenshots/race.py      # any X server (Xvfb is fine)

Loads the demo pair, asks for one greedy reply, races plain decoding on it,
then replays the race and grabs the panel just after the speculative stream
has finished while the plain one is still writing: docs/screenshots/race.png.
Every folder the app writes to is a temporary one.
"""

from __future__ import annotations

import sys

import shots
from shots import HERE, settle, wait

PROMPT = "Write a Python function that returns the squares of a list of numbers."


def main() -> int:
    tmp = shots.isolate()
    _app = shots.app()  # kept alive for the whole run
    window, _store = shots.demo_window(tmp, 1200, 800, lambda settings: setattr(settings, "max_tokens", 96))
    wait(window.baselines.measured)  # the calibration right after loading, before the engine is free
    window.send(PROMPT)
    wait(window.reply_finished)
    window.racing.race_last()
    wait(window.races.ready)
    panel = window.racing.panel
    if panel is None:
        print(f"no race: {window.last_error}", file=sys.stderr)
        return 1
    panel.resize(1000, 500)
    panel.start()  # from the beginning, now that the panel has its size
    spec_ms = int(panel.spec_seconds * 1000)
    settle(spec_ms + max(300, (int(panel.record.plain.finish_seconds * 1000) - spec_ms) // 3))
    panel.grab().save(str(HERE / "race.png"))
    print(panel.summary.text())
    print(panel.identity.text())
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
