"""GUI-thread latency while a reply streams at full speed.

Opens the real window offscreen on the demo pair, starts a 10 ms timer on the
GUI thread, streams a long reply, and prints the longest gap between timer
ticks (the goal: under 50 ms, i.e. the window never stalls visibly) along with
the tokens per second of the reply.

    QT_QPA_PLATFORM=offscreen python benchmarks/gui_latency.py [--max-tokens N] [--verdicts] [--prompt TEXT] [--load N]

The chat view draws the reply as Markdown (its reading view) unless
``--verdicts`` asks for the raw verdict view.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--depth", default="auto")
    parser.add_argument("--verdicts", action="store_true", help="draw the verdict view instead of Markdown")
    parser.add_argument("--prompt", default="Count from 1 to 300, separated by commas.")
    parser.add_argument("--load", type=int, default=0, help="busy background processes while the reply streams")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="specchat-latency-")
    for name in ("CONFIG", "CACHE"):
        os.environ.setdefault(f"SPECCHAT_{name}_DIR", os.path.join(tmp, name.lower()))

    from PySide6.QtCore import QEventLoop
    from PySide6.QtWidgets import QApplication

    from specchat.core.chat.store import ConversationStore
    from specchat.core.models.demo import provision_demo_pair
    from specchat.core.settings import load_settings
    from specchat.core.types import parse_depth
    from specchat.ui.main_window import MainWindow

    _app = QApplication(sys.argv)  # held for the whole run; the window needs it alive
    pair = provision_demo_pair()
    settings = load_settings()
    settings.max_tokens = args.max_tokens
    settings.repeat_penalty = 1.0  # the window's 1.1 would end the counting reply early; this wants a long one
    settings.depth = parse_depth(args.depth)
    store = ConversationStore(os.path.join(tmp, "conversations.sqlite3"))
    window = MainWindow(settings, store)
    window.chat_view.set_show_verdicts(args.verdicts)
    window.show()

    waiting = QEventLoop()
    window.models_loaded.connect(lambda *a: waiting.quit())
    window.load_models(pair.target, pair.draft)
    waiting.exec()

    from background_load import background_load
    from gui_timer import GapTimer

    timer = GapTimer()
    gaps = timer.gaps
    finished: list[object] = []
    streaming = QEventLoop()

    def caught(event: object) -> None:
        finished.append(event)
        streaming.quit()

    window.reply_finished.connect(caught)
    with background_load(args.load):
        timer.start()
        window.composer.setPlainText(args.prompt)
        window.composer.send()
        streaming.exec()
        timer.stop()
    stats = finished[0].stats  # type: ignore[attr-defined]
    view = "verdict view" if args.verdicts else "Markdown (reading view)"
    print(
        f"reply: {stats.generated} tokens at {stats.tokens_per_second:.1f} tok/s, depth {args.depth}, {view}, "
        f"background load: {args.load} busy process(es) on {os.cpu_count()} cores"
    )
    print(
        f"GUI timer (10 ms): {len(gaps)} ticks, longest gap {max(gaps):.1f} ms, "
        f"median {statistics.median(gaps):.1f} ms, 99th percentile {sorted(gaps)[int(len(gaps) * 0.99)]:.1f} ms"
    )
    window.close()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
