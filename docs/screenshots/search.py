"""Take docs/screenshots/search.png: the sidebar filtered by a search of titles and message text.

    DISPLAY=:99 python docs/screenshots/search.py

No model needed: a few stored conversations in private app folders, the real window, the word typed.
"""

from __future__ import annotations

import sys

import shots


def main() -> int:
    tmp = shots.isolate()
    app = shots.app()  # noqa: F841 - kept alive for the run
    from specchat.core.chat.store import ConversationStore
    from specchat.core.settings import load_settings
    from specchat.ui.main_window import MainWindow

    (tmp / "data").mkdir(parents=True, exist_ok=True)
    store = ConversationStore(tmp / "data" / "conversations.sqlite3")
    for title, text in [
        ("Lisbon trip", "Where can I eat pastel de nata near the river?"),
        ("Sorting in Python", "How do I sort a list of dicts by a key?"),
        ("Sourdough", "My starter smells of acetone; is the bakery method wrong?"),
        ("Bakery names", "Ideas for naming a small bakery"),
        ("Rust lifetimes", "Why does the borrow checker reject this?"),
    ]:
        cid = store.create_conversation(title)
        store.add_message(cid, "user", text)
    window = MainWindow(load_settings(), store)
    window.resize(900, 600)
    window.refresh_conversations()
    window.show()
    shots.settle()
    window.sidebar.search_field.setText("bakery")
    shots.settle()
    path = shots.HERE / "search.png"
    window.grab().save(str(path))
    print(path)
    window.close()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
