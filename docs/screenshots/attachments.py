"""Screenshots of attachments on the real demo pair, light and dark.

    DISPLAY=:99 python docs/screenshots/attachments.py      # any X server (Xvfb is fine)

Writes docs/screenshots/attachments-composer-{light,dark}.png (two files attached to the message being
written: their chips and the context meter, counted by the target), attachments-sent-{light,dark}.png (the
sent message with its chips, the reply quoting the file, and the stats panel's "Lookup in" row) and
attachments-too-big.png (the question before sending a document that does not fit). Every folder the app
writes to is a temporary one.
"""

from __future__ import annotations

import sys

import shots
from shots import settle, wait

HERE = shots.HERE
NOTES = """# Lighthouse log

The lighthouse keeper's cat is named Biscuit.
Biscuit sleeps on the lamp room stairs and wakes at the first foghorn.
The lamp was last serviced on 3 March; the next service is due in September.
"""
CODE = '''def lamp_hours(nights: int, hours_per_night: float = 11.5) -> float:
    """Hours the lamp burns over ``nights`` nights."""
    return nights * hours_per_night
'''
QUESTION = "When is the next service due? Quote the line from the log."


def main() -> int:
    tmp = shots.isolate()
    _app = shots.app()  # kept alive for the whole run
    notes, code = tmp / "lighthouse-log.md", tmp / "lamp.py"
    notes.write_text(NOTES, encoding="utf-8")
    code.write_text(CODE, encoding="utf-8")

    def configure(settings: object) -> None:
        settings.max_tokens = 48  # type: ignore[attr-defined]
        settings.theme = "light"  # type: ignore[attr-defined]
        settings.temperature = 0.0  # type: ignore[attr-defined]

    window, store = shots.demo_window(tmp, 1280, 860, configure)
    wait(window.baselines.measured)  # the calibration right after loading
    for theme in ("light", "dark"):
        window.look.set_theme(theme)
        window.new_conversation()
        window.files.pick_files = lambda: [str(notes), str(code)]
        window.page.attach_button.click()
        window.composer.setPlainText(QUESTION)
        settle(1500)  # the meter's count from the target
        window.grab().save(str(HERE / f"attachments-composer-{theme}.png"))
        window.files.set_all([window.files.attachments[0]])  # the log alone: the reply quotes it
        window.composer.send()
        wait(window.reply_finished)
        settle()
        window.grab().save(str(HERE / f"attachments-sent-{theme}.png"))

    window.look.set_theme("light")
    window.new_conversation()
    big = tmp / "annual-report.txt"
    big.write_text("\f".join(f"Page {n}. " + "The harbour accounts for the year. " * 90 for n in range(1, 61)))
    window.files.attach_paths([str(big)])
    window.composer.setPlainText("Summarise the report")
    settle(1500)
    window.composer.send()
    settle()
    box = window.files.fit_box
    if box is not None:
        box.grab().save(str(HERE / "attachments-too-big.png"))
        box.reject()
    window.close()
    store.close()
    print("wrote docs/screenshots/attachments-{composer,sent}-{light,dark}.png, attachments-too-big.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
