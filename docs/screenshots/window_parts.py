"""Screenshots of the window's newer parts on the real demo pair, light and dark, at 900x600 and full size.

    DISPLAY=:99 python docs/screenshots/window_parts.py [--dark] [--size 900x600]   # any X server (Xvfb)

One window shows them together: the system-prompt indicator above the chat, the sampler preset in the
settings panel, a reply cut at the token limit with its Continue link, the hover actions over that reply,
and the sidebar's search with the matched words highlighted. Writes
docs/screenshots/parts-<theme>-<size>.png and presets-<theme>.png (the settings panel's top with the
preset list open, the same at every size, grabbed from the screen because the list is a popup). Every
folder the app writes to is a temporary one.
"""

from __future__ import annotations

import argparse
import sys

import shots
from shots import settle, wait

PROMPT = "List the days of the week, one per line, each with one thing people often do that day."
EARLIER = [
    ("Week plans", "What should I cook each day of the week?"),
    ("Sourdough", "My starter smells of acetone; is that normal?"),
]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dark", action="store_true")
    parser.add_argument("--size", default="1600x1000", help="WIDTHxHEIGHT (1600x1000: full size)")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    theme = "dark" if args.dark else "light"
    name = f"{theme}-{'full' if args.size == '1600x1000' else args.size}"

    tmp = shots.isolate()
    app = shots.app()
    from PySide6.QtCore import QPoint

    def configure(settings: object) -> None:
        settings.max_tokens = 40  # type: ignore[attr-defined]
        settings.theme = theme  # type: ignore[attr-defined]

    window, store = shots.demo_window(tmp, width, height, configure)
    for title, text in EARLIER:
        store.add_message(store.create_conversation(title), "user", text)
    wait(window.baselines.measured)  # the calibration right after loading
    window.new_conversation()
    window.chat.set_system_prompt("You are a concise assistant. Answer in plain English, one short line per item.")
    window.page.system_prompt_chip.show_prompt(window.chat.transcript.system_prompt)
    window.send(PROMPT)
    wait(window.reply_finished)
    window.refresh_conversations()
    window.sidebar.search_field.setText("week")
    settle()
    view = window.chat_view
    document = view.document()
    found = document.find("Monday")
    rect = view.cursorRect(found) if not found.isNull() else view.viewport().rect()
    view.hover_at(QPoint(rect.center().x() + 40, rect.center().y()))
    settle()
    window.grab().save(str(shots.HERE / f"parts-{name}.png"))

    combo = window.panel.presets.combo
    window.panel.ensureWidgetVisible(combo)
    combo.showPopup()
    settle(600)
    panel = window.panel  # the settings panel's top, where the list opens
    origin = panel.mapToGlobal(panel.rect().topLeft())
    shot = app.primaryScreen().grabWindow(0, origin.x(), origin.y(), panel.width(), min(panel.height(), 260))
    shot.save(str(shots.HERE / f"presets-{theme}.png"))
    combo.hidePopup()
    window.close()
    store.close()
    print(f"wrote docs/screenshots/parts-{name}.png and presets-{theme}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
