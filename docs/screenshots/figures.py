"""A screenshot of the stats panel's figures after a real reply on a busy machine, with the status bar's note.

    DISPLAY=:99 python docs/screenshots/figures.py      # any X server (Xvfb is fine)

Loads the demo pair (draft model, depth 4), stores a plain-decoding figure of
200 tokens/s for the pair and settings to stand for a quiet machine (the demo
pair decodes far slower than that on a CPU), asks for one reply and grabs the
window: the Plain decoding row beside the speed-up is the reply's own probe,
and the status bar says the machine is busy. Writes docs/screenshots/busy-figures.png.
Every folder the app writes to is a temporary one.
"""

from __future__ import annotations

import time

import shots
from shots import HERE, settle, wait

PROMPT = "List the days of the week, one per line."
QUIET = 200.0


def configure(settings: object) -> None:
    from specchat.core.types import DrafterKind

    for name, value in (("max_tokens", 48), ("depth", 4), ("drafter", DrafterKind.DRAFT_MODEL)):
        setattr(settings, name, value)


def main() -> int:
    from specchat.core.chat.baseline import Baseline, remember

    tmp = shots.isolate()
    _app = shots.app()  # kept alive for the whole run
    window, _store = shots.demo_window(tmp, 1280, 860, configure)
    wait(window.baselines.measured)  # the calibration right after loading
    key = window.stats.baseline.key
    window.settings.baselines = remember(window.settings.baselines, Baseline(key, QUIET, 48, time.time()))
    window.send(PROMPT)
    wait(window.reply_finished)
    settle(600)
    window.grab().save(str(HERE / "busy-figures.png"))
    stats = window.stats
    print(stats.tokens_per_second.text(), "|", stats.plain.text(), "|", stats.speedup.text())
    print(window.statusBar().currentMessage())
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
