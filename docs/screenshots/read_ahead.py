"""A screenshot of reading the prompt while typing, on the real demo pair.

    DISPLAY=:91 python docs/screenshots/read_ahead.py      # any X server (Xvfb is fine)

Writes docs/screenshots/read-ahead.png: a pasted document in the composer, read ahead (the status bar's
quiet hint), and the Speculation panel's *Read the prompt while I type*. Every folder the app writes to is a
temporary one.
"""

from __future__ import annotations

import sys

import shots
from shots import settle, wait

HERE = shots.HERE
NOTES = "\n".join(
    f"{i}. The ferry to the island leaves at {6 + i % 12} o'clock from pier {i % 5}." for i in range(1, 31)
)
MESSAGE = "Proofread these timetable notes and list the lines that repeat a time:\n\n" + NOTES


def main() -> int:
    tmp = shots.isolate()
    _app = shots.app()  # kept alive for the whole run

    def configure(settings: object) -> None:
        settings.theme = "light"  # type: ignore[attr-defined]

    window, store = shots.demo_window(tmp, 1280, 860, configure)
    wait(window.baselines.measured)  # the calibration right after loading
    settle(500)
    window.statusBar().clearMessage()
    window.composer.setPlainText(MESSAGE)
    wait(window.read_ahead.done)
    settle()
    window.grab().save(str(HERE / "read-ahead.png"))
    window.close()
    store.close()
    print("wrote docs/screenshots/read-ahead.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
