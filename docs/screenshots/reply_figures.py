"""Screenshots of each reply's figures line, a poem's kept line breaks and code kept readable under rejections.

    DISPLAY=:99 python docs/screenshots/reply_figures.py      # any X server (Xvfb is fine)

A stored conversation (no model needed), its replies streamed into the store in
hand-made rounds with seeded rejections (two inside the JSON, one after
``[::-1]``) and stored figures: the window reopens it as after a restart. Writes
reply-figures-{light,dark}-{1600x1000,900x600}.png (the page's end: the code
reply and its line, the second saying it waited for a served request) and
reply-poem-{light,dark}-900x600.png (scrolled to the poem). Every folder the
app writes to is a temporary one.
"""

from __future__ import annotations

import random
import re
import sys

import shots
from shots import settle

HERE = shots.HERE
sys.path.insert(0, str(shots.ROOT / "tests"))

POEM = (
    "**The Sea at Dusk**\n\n"
    "Grey water folds on stone,\n"
    "the gulls call out alone,\n"
    "and every wave comes home.\n\n"
    "A quiet shore, the light gone slow."
)
CODE = (
    "Here is the record:\n\n"
    "```json\n"
    "{\n"
    '  "Author": "Ursula K. Le Guin",\n'
    '  "Title": "The Left Hand of Darkness",\n'
    '  "Published": "1969-03-01",\n'
    '  "Pages": 286\n'
    "}\n"
    "```\n\n"
    "and the list reversed in Python:\n\n"
    "```python\n"
    "names = authors[::-1]\n"
    "```\n"
)
# (piece the round ends before, the draft's wrong guess): rejections where the issue saw them in code
REJECT_BEFORE = {'"Author': "Name", "1969": "20", "-01": "12", "]": ")", "Grey": "The", "home": " back"}


def pieces(text: str) -> list[str]:
    return re.findall(r"\s*[\w]+|\s*[^\w\s]|\s+", text)


def rounds(text: str, seed: int) -> list[object]:
    """Verified rounds that spell ``text``: up to 4 tokens each, the last the target's; where ``REJECT_BEFORE``
    says, the round's draft guessed wrong there and the target's token replaced it."""
    from specchat.core.types import Verified

    rng = random.Random(seed)
    tokens = pieces(text)
    rejected_at = {}
    for i in range(len(tokens)):
        rest = "".join(tokens[i:])
        for before, guess in REJECT_BEFORE.items():
            if rest.lstrip().startswith(before):
                rejected_at.setdefault(i, guess)
    out, i, n = [], 0, 0
    while i < len(tokens):
        end = min(len(tokens), i + rng.randint(2, 4))
        hit = next((r for r in sorted(rejected_at) if i < r < end + 1 and r < len(tokens)), None)
        if hit is not None:
            end = hit + 1  # the round ends on the target's token that replaced the wrong guess
        acc, corr = tokens[i : end - 1], tokens[end - 1]
        rej = (rejected_at[hit],) if hit is not None else ()
        k = len(acc) + len(rej)
        out.append(
            Verified(
                round=n,
                depth=k,
                accepted=tuple(range(len(acc))),
                rejected=tuple(range(len(rej))),
                correction=7,
                accepted_pieces=tuple(acc),
                rejected_pieces=rej,
                correction_piece=corr,
                target_probs=(0.4,) * k,
                draft_probs=(0.7,) * k,
            )
        )
        i = end
        n += 1
    return out


def store_reply(store: object, cid: int, text: str, seed: int, tps: float, first: float, waited: float) -> None:
    from specchat.core.chat.store import ReplyWriter
    from specchat.core.chat.transcript import ReplyFigures
    from specchat.core.types import Finished, FinishReason, GenerationStats

    figures = ReplyFigures()
    writer = ReplyWriter(store, cid, figures=figures)  # type: ignore[arg-type]
    for event in rounds(text, seed):
        figures.fold([event])
        writer.feed(event)
    figures.first_token_seconds, figures.waited_seconds = first, waited
    stats = GenerationStats(
        rounds=figures.rounds,
        drafted=figures.drafted,
        accepted=figures.accepted,
        generated=figures.generated,
        prompt_tokens=48,
        generate_seconds=figures.generated / tps,
        depth=4,
        plain_tokens_per_second=25.4,
        plain_tokens=32,
    )
    finished = Finished(FinishReason.EOS, stats)
    figures.fold([finished])
    writer.feed(finished)


def main() -> int:
    tmp = shots.isolate()
    _app = shots.app()
    from specchat.core.chat.store import ConversationStore
    from specchat.core.settings import load_settings
    from specchat.ui.main_window import MainWindow
    from support.fake_host import FakeHost

    store = ConversationStore()
    cid = store.create_conversation("A poem and a book record")
    store.add_message(cid, "user", "Write a short poem about the sea, one line at a time.")
    store_reply(store, cid, POEM, 1, 41.2, 0.31, 0.0)
    store.add_message(cid, "user", "A JSON record for a book, and how to reverse a list in Python?")
    store_reply(store, cid, CODE, 2, 38.7, 0.42, 6.8)
    wrote = []
    for theme in ("light", "dark"):
        settings = load_settings()
        settings.last_conversation = cid
        settings.theme = theme
        window = MainWindow(settings, store, host=FakeHost())
        for width, height in ((1600, 1000), (900, 600)):
            window.resize(width, height)
            window.show()
            settle(600)
            window.chat_view.jump_to_latest()
            settle()
            name = f"reply-figures-{theme}-{width}x{height}.png"
            window.grab().save(str(HERE / name))
            wrote.append(name)
        bar = window.chat_view.verticalScrollBar()
        at = window.chat_view.document().find("Grey water")
        bar.setValue(max(0, window.chat_view.cursorRect(at).top() + bar.value() - 80))
        settle()
        name = f"reply-poem-{theme}-900x600.png"
        window.grab().save(str(HERE / name))
        wrote.append(name)
        window.close()
        settle()
    store.close()
    print("wrote " + ", ".join(f"docs/screenshots/{n}" for n in wrote), f"(app folders in {tmp})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
