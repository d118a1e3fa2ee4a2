"""Take docs/screenshot-reading.png and docs/screenshot-verdicts.png: one reply in both looks of the chat view.

    DISPLAY=:99 python docs/screenshots/reading.py        # any X server (Xvfb is fine)
    DISPLAY=:99 python docs/screenshots/reading.py /tmp --dark   # the same in a dark palette, into /tmp

The reply is a fixed Markdown text streamed through the view in rounds whose
fates come from a seeded random draft (about three in four drafts accepted,
the rejected ones a plausible other word), the way the window feeds the view.
The reading view is taken with the tooltip of one rejection marker showing.
"""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT))

QUESTION = "How do I roast carrots? And a small Python timer for the oven, please."
REPLY = """## Roasted carrots

Roast them **hot and spread out**, so they brown instead of steaming:

1. Heat the oven to *220 °C* (425 °F).
2. Cut the carrots into even sticks and toss with oil, salt and pepper.
3. Roast for **25–30 minutes**, turning once halfway.

| Cut | Time |
|-----|------|
| Whole, thin | 20 min |
| Sticks | 25–30 min |

A timer that reminds you to turn them:

```python
import time

def oven_timer(minutes: int) -> None:
    for left in range(minutes, 0, -1):
        print(f"{left} min left")  # turn at the halfway mark
        time.sleep(60)
    print("Done!")
```

Serve with a squeeze of lemon.
"""
OTHER_WORDS = ["the", " a", " them", " oven", " until", " 200", " bake", "ly", " water", ",", " minutes", "()", " sec"]


def rounds(text: str, seed: int = 7) -> list[tuple[tuple[str, ...], tuple[str, ...], str]]:
    """The reply cut into tokens and grouped into verified rounds with drafted, accepted and rejected pieces."""
    rng = random.Random(seed)
    tokens = re.findall(r" ?[A-Za-z]+|\d|\n+| +|[^\sA-Za-z\d]", text)
    out, i = [], 0
    while i < len(tokens):
        depth = rng.randint(2, 5)
        accepted = 0
        while accepted < depth and i + accepted < len(tokens) - 1 and rng.random() < 0.78:
            accepted += 1
        acc = tuple(tokens[i : i + accepted])
        i += accepted
        rejected = (rng.choice(OTHER_WORDS),) if accepted < depth and i < len(tokens) else ()
        out.append((acc, rejected, tokens[i] if i < len(tokens) else ""))
        i += 1
    return out


def main() -> int:
    from PySide6.QtCore import QPoint
    from PySide6.QtGui import QGuiApplication, QTextCursor
    from PySide6.QtWidgets import QApplication, QToolTip, QVBoxLayout, QWidget

    from specchat.core.types import Finished, FinishReason, GenerationStats, Verified
    from specchat.ui.chat_view import ChatView, TokenLegend
    from specchat.ui.token_styles import REJECTION_MARKER

    app = QApplication.instance() or QApplication(sys.argv[:1])
    out = Path(sys.argv[1]) if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else DOCS
    if "--dark" in sys.argv:  # to look at the dark palette (not saved in docs/)
        from PySide6.QtGui import QColor, QPalette

        app.setStyle("Fusion")
        dark = QPalette()
        for role, colour in (
            (QPalette.ColorRole.Window, "#2b2b2b"),
            (QPalette.ColorRole.Base, "#1e1e1e"),
            (QPalette.ColorRole.Text, "#e6e6e6"),
            (QPalette.ColorRole.WindowText, "#e6e6e6"),
            (QPalette.ColorRole.PlaceholderText, "#9a9a9a"),
            (QPalette.ColorRole.Link, "#58a6ff"),
            (QPalette.ColorRole.Mid, "#555555"),
            (QPalette.ColorRole.ToolTipBase, "#333333"),
            (QPalette.ColorRole.ToolTipText, "#e6e6e6"),
        ):
            dark.setColor(role, QColor(colour))
        app.setPalette(dark)
    window = QWidget()
    window.setWindowTitle("specchat")
    layout = QVBoxLayout(window)
    view = ChatView()
    layout.addWidget(TokenLegend(view=view))
    layout.addWidget(view, 1)
    window.resize(760, 580)
    window.move(0, 0)
    window.show()

    view.transcript.add_user(QUESTION)
    view.append_message()
    view.transcript.begin_reply()
    view.append_message()
    for n, (acc, rej, corr) in enumerate(rounds(REPLY)):
        k = len(acc) + len(rej)
        event = Verified(
            n,
            k,
            tuple(range(len(acc))),
            tuple(range(len(rej))),
            1,
            acc,
            rej,
            corr,
            tuple(0.9 - 0.1 * j for j in range(k)),
            tuple(0.8 for _ in range(k)),
            0.6,
        )
        view.transcript.fold(event)
        view.feed([event])
        view.flush()
        app.processEvents()
    done = Finished(FinishReason.EOS, GenerationStats())
    view.transcript.fold(done)
    view.feed([done])
    view.flush()
    assert view.transcript.messages[-1].content == REPLY
    view.verticalScrollBar().setValue(0)
    for _ in range(20):
        app.processEvents()

    found = view.document().find(REJECTION_MARKER, view.document().find("Serve").position())
    cursor = QTextCursor(view.document())
    cursor.setPosition(found.selectionStart())
    spot = view.cursorRect(cursor).bottomRight() + QPoint(2, 0)
    tip = found.charFormat().toolTip()
    QToolTip.showText(view.viewport().mapToGlobal(spot), tip, view.viewport())
    for _ in range(20):
        app.processEvents()
    screen = QGuiApplication.primaryScreen()
    frame = window.frameGeometry()
    screen.grabWindow(0, frame.x(), frame.y(), frame.width(), frame.height()).save(str(out / "screenshot-reading.png"))
    QToolTip.hideText()

    view.set_show_verdicts(True)
    view.verticalScrollBar().setValue(0)
    for _ in range(20):
        app.processEvents()
    window.grab().save(str(out / "screenshot-verdicts.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
