"""Screenshots of the window's design: turns, composer, icons and type, in both themes and two sizes.

    DISPLAY=:99 python docs/screenshots/look.py after      # any X server (Xvfb is fine)
    PYTHONPATH=<a checkout before the change> DISPLAY=:99 python docs/screenshots/look.py before

A stored conversation (no model needed): a question, a reply with a list and a
code block streamed into the store in hand-made rounds (so its tokens keep their
fates and its figures line), and a follow-up with its short reply; two other
conversations fill the sidebar. The window reopens it as after a restart, with
a pretend pair loaded so the composer's buttons are live. Writes
look-{before,after}-{light,dark}-{900x600,1600x1000}.png, scrolled to the top of
the conversation. Every folder the app writes to is a temporary one.
"""

from __future__ import annotations

import sys

import shots
from reply_figures import store_reply
from shots import settle

HERE = shots.HERE
sys.path.insert(0, str(shots.ROOT / "tests"))

QUESTION = "How do I reverse a list in Python? Keep it short."
REPLY = (
    "Two common ways:\n\n"
    "- `items[::-1]` makes a reversed **copy**;\n"
    "- `items.reverse()` reverses the list **in place**.\n\n"
    "```python\n"
    "names = ['Ada', 'Grace', 'Linus']\n"
    "print(names[::-1])  # ['Linus', 'Grace', 'Ada']\n"
    "```\n\n"
    "Use the copy when you still need the original order."
)
FOLLOW_UP = "And a string?"
SHORT = "Slicing works the same way: `'hello'[::-1]` gives `'olleh'`."


def main() -> int:
    stage = sys.argv[1] if len(sys.argv) > 1 else "after"
    tmp = shots.isolate()
    _app = shots.app()
    from specchat.core.chat.store import ConversationStore
    from specchat.core.settings import load_settings
    from specchat.ui.main_window import MainWindow
    from support.fake_host import FakeHost

    store = ConversationStore()
    for title in ("Trip ideas for the weekend", "Summarise the meeting notes"):
        store.add_message(store.create_conversation(title), "user", title)
    cid = store.create_conversation("Reverse a list in Python")
    store.add_message(cid, "user", QUESTION)
    store_reply(store, cid, REPLY, 3, 41.2, 0.31, 0.0)
    store.add_message(cid, "user", FOLLOW_UP)
    store_reply(store, cid, SHORT, 4, 44.8, 0.18, 0.0)
    wrote = []
    for theme in ("light", "dark"):
        settings = load_settings()
        settings.last_conversation = cid
        settings.theme = theme
        host = FakeHost()
        window = MainWindow(settings, store, host=host.as_host())
        host.loaded()
        for width, height in ((900, 600), (1600, 1000)):
            window.resize(width, height)
            window.show()
            settle(600)
            window.chat_view.verticalScrollBar().setValue(0)
            settle()
            name = f"look-{stage}-{theme}-{width}x{height}.png"
            window.grab().save(str(HERE / name))
            wrote.append(name)
        window.close()
        settle()
    store.close()
    print("wrote " + ", ".join(f"docs/screenshots/{n}" for n in wrote), f"(app folders in {tmp})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
