"""Questions about an attached document, asked in the real window: attached, pasted, and plainly decoded.

One document (``benchmarks/prompts/garden_report.md``, an 81-line report of 1,277 tokens, four typos in its
"Water" section) and three questions about it: quote a paragraph exactly, fix the typos of a paragraph,
summarise it.
Each question is asked, each time in a new conversation of the window (offscreen, the demo pair, its default
settings: the automatic drafter, auto depth, greedy), three ways taking turns in a rotating order:

- ``attached``: the file attached through the composer (its lookup drafts name it: "lookup in <file>");
- ``pasted``: the same text pasted into the message, then the question (lookup sees it as the conversation);
- ``plain``: the file attached, drafter "none" (plain decoding, the reference).

Per reply: tokens, the window's tok/s, the panel's speed-up (over plain decoding timed right after the reply),
the race's ratio on the same reply (plain decoding raced on it; not for ``plain``), the drafts accepted of
drafted by where they came from (the document, the conversation, the draft model: the stats panel's rows), and
whether the greedy text equals plain decoding's (the race's plain run; for ``plain``, whether ``attached``
wrote the same). The summary gives, per question, ``attached`` over ``plain`` and over ``pasted`` in window
tok/s, and the panel's figure against the race's.

With ``--load N``, N busy processes (one pure-Python spin loop each) run for the whole measurement.

    QT_QPA_PLATFORM=offscreen python benchmarks/attachment_window.py [--repeats 1] [--max-tokens 128] [--load 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from background_load import background_load  # the script's own folder
from window_driver import WindowReply, open_window, race_last_reply, send_and_wait

DOCUMENT = Path(__file__).resolve().parent / "prompts" / "garden_report.md"
QUESTIONS = {
    "quote": 'Quote the first paragraph under "Volunteers and Events" exactly, word for word.',
    "typos": 'The paragraph under "Water" has spelling mistakes. Write it out again with them corrected.',
    "summary": "Summarise this report in five sentences.",
}
WAYS = ("attached", "pasted", "plain")


@dataclass
class Row:
    question: str
    way: str
    reply: WindowReply
    race: float | None  # the race's ratio on this reply (None: plain decoding is not raced)
    document: tuple[int, int]  # lookup drafts from the document: (drafted, accepted)
    conversation: tuple[int, int]  # ... from the conversation (a pasted document is part of it)
    model: tuple[int, int]  # the draft model's drafts
    same_as_plain: bool | None  # greedy text equal to plain decoding's (None: not known yet)


def counts(table: dict[str, list[int]], key: str) -> tuple[int, int]:
    drafted, accepted = table.get(key, [0, 0])
    return drafted, accepted


def shown(counted: tuple[int, int]) -> str:
    drafted, accepted = counted
    return f"{accepted}/{drafted}" if drafted else "-"


def ratio(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="times each question is asked each way")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--load", type=int, default=0, help="busy background processes during the run")
    args = parser.parse_args()
    if args.repeats < 1 or args.max_tokens < 1 or args.load < 0:
        raise SystemExit("attachment_window: --repeats and --max-tokens take 1 or more, --load 0 or more")
    tmp = tempfile.mkdtemp(prefix="specchat-attachment-window-")
    started = time.monotonic()
    opened = open_window(args.max_tokens, tmp)
    window = opened.window

    from specchat.core.engine.registry import drafter_entry, drafter_names
    from specchat.core.types import DrafterKind, DraftSource

    text = DOCUMENT.read_text(encoding="utf-8")
    default_drafter = window.controls.drafter.currentIndex()
    print(
        f"demo pair in the window, {drafter_entry(window.controls.drafter_kind).key} drafter, auto depth, "
        f"context {window.controls.context_size.value()}, {args.max_tokens} tokens, {DOCUMENT.name} "
        f"({len(text.splitlines())} lines), background load: {args.load} busy process(es) on {os.cpu_count()} "
        f"cores, load average at start {os.getloadavg()[0]:.1f}",
        flush=True,
    )

    def ask(question: str, way: str) -> Row:
        window.new_conversation()
        plain = way == "plain"
        window.controls.drafter.setCurrentIndex(
            drafter_names().index(DrafterKind.NONE.value) if plain else default_drafter
        )
        if way == "pasted":
            window.composer.setPlainText(f"{text}\n\n{QUESTIONS[question]}")
        else:
            window.files.attach_paths([str(DOCUMENT)])
            window.composer.setPlainText(QUESTIONS[question])
        if window.page.context_meter.over:
            raise SystemExit(f"{DOCUMENT.name} and the reply do not fit the window's context; lower --max-tokens")
        reply = send_and_wait(window)
        figures = reply.message.figures
        assert figures is not None
        race = None if plain else race_last_reply(window)
        return Row(
            question,
            way,
            reply,
            race.ratio if race is not None else None,
            counts(figures.by_origin, DOCUMENT.name),
            counts(figures.by_origin, ""),
            counts(figures.by_source, DraftSource.MODEL.value),
            race.plain.text == reply.message.content if race is not None else None,
        )

    rows: list[Row] = []
    with background_load(args.load):
        for repeat in range(args.repeats):
            for q, question in enumerate(QUESTIONS):
                # Who goes first rotates across questions and repeats: the runtime's caches and the composite's
                # tables would favour a fixed order.
                turn = (q + repeat) % len(WAYS)
                order = WAYS[turn:] + WAYS[:turn]
                asked = {way: ask(question, way) for way in order}
                asked["plain"].same_as_plain = asked["attached"].reply.message.content == (
                    asked["plain"].reply.message.content
                )
                rows.extend(asked[way] for way in WAYS)
                for way in WAYS:
                    r = asked[way]
                    print(
                        f"  {repeat + 1}. {question:<8} {way:<9} {r.reply.tokens_per_second:6.1f} tok/s  "
                        f"panel {ratio(r.reply.panel):>6}  race {ratio(r.race):>6}  doc {shown(r.document):>7}  "
                        f"conversation {shown(r.conversation):>7}  model {shown(r.model):>7}  "
                        f"= plain {r.same_as_plain}  {r.reply.message.content[:60]!r}",
                        flush=True,
                    )
    window.controls.drafter.setCurrentIndex(default_drafter)

    print()
    print(
        "| question | way | tokens | window tok/s | panel | race | from the document | from the conversation "
        "| from the draft model | greedy text = plain |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        final = r.reply.message.figures.final if r.reply.message.figures else None
        same = "-" if r.same_as_plain is None else ("yes" if r.same_as_plain else "no")
        print(
            f"| {r.question} | {r.way} | {final.generated if final else 0} | {r.reply.tokens_per_second:.1f} "
            f"| {ratio(r.reply.panel)} | {ratio(r.race)} | {shown(r.document)} | {shown(r.conversation)} "
            f"| {shown(r.model)} | {same} |"
        )
    print()
    print("| question | attached / plain | attached / pasted | pasted / plain |")
    print("|---|---|---|---|")

    def rate(question: str, way: str) -> float:
        return statistics.median(r.reply.tokens_per_second for r in rows if (r.question, r.way) == (question, way))

    for question in QUESTIONS:
        attached, pasted, plain = (rate(question, way) for way in WAYS)
        print(f"| {question} | {attached / plain:.2f}x | {attached / pasted:.2f}x | {pasted / plain:.2f}x |")
    against = [r.reply.panel / r.race - 1 for r in rows if r.reply.panel is not None and r.race]
    if against:
        print(
            f"\npanel against race on the same reply: median {statistics.median(against):+.1%}, worst "
            f"{max(against, key=abs):+.1%} over {len(against)} replies with both figures"
        )
    spoken = [r for r in rows if r.way != "plain"]
    print(
        f"panel figures shown {sum(r.reply.panel is not None for r in spoken)}/{len(spoken)}; greedy text = plain: "
        f"{sum(bool(r.same_as_plain) for r in rows)}/{len(rows)}; load average at the end {os.getloadavg()[0]:.1f}; "
        f"{time.monotonic() - started:.0f} s in all"
    )
    opened.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
