"""Take the sidebar's screenshots: conversations grouped by day with their dates and a pinned one, the sidebar's
menu, Help > Keyboard shortcuts, and the settings panel beside its scroll bar, in both themes at two sizes.

    DISPLAY=:95 python docs/screenshots/sidebar.py

No model needed: stored conversations (dated from today back to last month) in private app folders, the real
window. Writes sidebar-{light,dark}-{900x600,full}.png, sidebar-menu.png and shortcuts-{light,dark}.png.
"""

from __future__ import annotations

import sys
import time

import shots

HOUR, DAY = 3600.0, 86400.0
CONVERSATIONS = [  # title, how long ago, pinned, the first message, a reply
    ("Trip plan for Lisbon", 3 * DAY, True, "Plan three days in Lisbon in May.", "Day 1: Alfama and the castle…"),
    ("Morning notes", 0.5 * HOUR, False, "Summarise my notes from this morning.", "Three points stood out…"),
    ("Sorting a list of dicts by a key", 2 * HOUR, False, "How do I sort a list of dicts by a key?", "Use sorted()…"),
    ("Hi! What can you help me with today?", DAY + 2 * HOUR, False, "Hi! What can you help me with today?", "Hi!"),
    ("Hi! What can you help me with today?", DAY + 6 * HOUR, False, "Hi! What can you help me with today?", "Hello!"),
    ("Tax question about a second home", 4 * DAY, False, "Is a second home taxed differently?", "It depends…"),
    ("Describe the famous painting by…", 12 * DAY, False, "Describe the famous painting by Vermeer.", "The Girl…"),
    ("Sourdough starter smells of acetone", 40 * DAY, False, "My starter smells of acetone.", "Feed it more…"),
]


def main() -> int:
    tmp = shots.isolate()
    app = shots.app()
    from PySide6.QtCore import QPoint

    from specchat.core.chat.store import ConversationStore
    from specchat.core.settings import load_settings
    from specchat.ui.main_window import MainWindow

    (tmp / "data").mkdir(parents=True, exist_ok=True)
    store = ConversationStore(tmp / "data" / "conversations.sqlite3")
    now = time.time()
    opened = 0
    for title, ago, pinned, question, answer in reversed(CONVERSATIONS):
        cid = store.create_conversation(title)
        store.add_message(cid, "user", question)
        store.finish_message(store.add_message(cid, "assistant", answer), "eos", {})
        store._db.execute("UPDATE conversations SET updated = ?, created = ? WHERE id = ?", (now - ago, now - ago, cid))
        store.set_pinned(cid, pinned)
        opened = opened or (cid if title == "Morning notes" else 0)
    for theme in ("light", "dark"):
        for width, height, name in ((900, 600, "900x600"), (1600, 1000, "full")):
            settings = load_settings()
            settings.theme, settings.depth, settings.last_conversation = theme, 4, opened
            window = MainWindow(settings, store)
            window.resize(width, height)
            window.move(0, 0)
            window.splitter.setSizes([260, width - 560, 300])
            window.show()
            shots.settle()
            window.chat.open_conversation(opened)
            shots.settle()
            path = shots.HERE / f"sidebar-{theme}-{name}.png"
            window.grab().save(str(path))
            print(path)
            if name == "full":
                dialog = window.keyboard_shortcuts()
                shots.settle()
                path = shots.HERE / f"shortcuts-{theme}.png"
                dialog.grab().save(str(path))
                print(path)
                dialog.close()
            if name == "full" and theme == "light":
                row = window.sidebar.list.item(0)
                menu = window.sidebar.context_menu(row)
                rect = window.sidebar.list.visualItemRect(row)
                menu.popup(window.sidebar.list.viewport().mapToGlobal(QPoint(40, rect.bottom())))
                shots.settle()
                branch = next(a for a in menu.actions() if a.objectName() == "branch")
                menu.setActiveAction(branch)
                branch.menu().popup(menu.mapToGlobal(QPoint(menu.width() - 4, menu.actionGeometry(branch).top())))
                shots.settle()
                screen = app.primaryScreen().grabWindow(0, 0, 0, 760, 420)
                path = shots.HERE / "sidebar-menu.png"
                screen.save(str(path))
                print(path)
                branch.menu().close()
                menu.close()
            window.close()
            shots.settle(100)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
