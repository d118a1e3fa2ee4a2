"""Soak test of the real window: a long session of mixed actions, in a child process.

The child opens the main window offscreen on the demo pair and drives it
through at least ``--replies`` replies: sending in the current conversation,
new conversations, switching, Regenerate, Edit and resend, Stop mid-reply,
depth and Auto changes, prompts near the context limit, deletes, small text files attached to some
messages, and ``--hub-actions`` visits to File → Choose models… → Search the hub: a search, a
repository's files, a download with progress (every other one cancelled after its first progress and
resumed), the dialog closed, against the tests' loopback hub that the parent serves (see
``soak_hub.py``; the Hugging Face hub is never asked). Every
``--interval`` seconds it samples RSS, the Python object count, the database
size, the thread count and the worst gap of a 10 ms GUI timer. The parent
prints those samples, the replies by finish reason, the child's exit code and
its stderr, and checks that every message the window showed at the end of
each reply is in the database after quitting (with its attachments), and every downloaded file against
the hub's.

    QT_QPA_PLATFORM=offscreen python benchmarks/soak.py [--replies 150] [--max-tokens 24] [--seed 1] [--hub-actions 4]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from soak_hub import check_downloads, hub_action, hub_env, resumed_kib, serve_stocked, write_attachments

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

# Qt's offscreen platform says these on every top-level show(); not about our code.
QT_NOISE = ("This plugin does not support propagateSizeHints()", "This plugin does not support raise()")

PROMPTS = [
    "List the days of the week, one per line.",
    "Explain how a bicycle works in two sentences.",
    "Write a Python function that reverses a string.",
    "Count from 1 to 20, separated by commas.",
    "What is the capital of France? Answer briefly.",
    "Give three tips for writing clear emails.",
    "Repeat after me: the quick brown fox jumps over the lazy dog.",
]


def _rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def child(args: argparse.Namespace, workdir: Path) -> int:
    """Drive the window; write samples and expectations as JSON lines to ``workdir/soak.jsonl``."""
    import gc

    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from specchat.core.chat.store import ConversationStore
    from specchat.core.models.demo import provision_demo_pair
    from specchat.core.settings import load_settings
    from specchat.ui.main_window import MainWindow

    rng = random.Random(args.seed)
    out = (workdir / "soak.jsonl").open("w", encoding="utf-8")

    def record(kind: str, **data: object) -> None:
        out.write(json.dumps({"kind": kind, **data}) + "\n")
        out.flush()

    app = QApplication(sys.argv[:1])
    pair = provision_demo_pair()
    settings = load_settings()
    settings.max_tokens = args.max_tokens
    settings.n_ctx = 512
    settings.depth = None
    db = workdir / "conversations.sqlite3"
    store = ConversationStore(db)
    window = MainWindow(settings, store)
    window.show()

    def wait(signal: object, timeout_ms: int = 300_000) -> list[object]:
        loop = QEventLoop()
        got: list[object] = []

        def done(*a: object) -> None:
            got.extend(a)
            loop.quit()

        signal.connect(done)  # type: ignore[attr-defined]
        QTimer.singleShot(timeout_ms, loop.quit)
        loop.exec()
        signal.disconnect(done)  # type: ignore[attr-defined]
        if not got:
            raise SystemExit(f"timed out waiting for {signal}")
        return got

    window.load_models(pair.target, pair.draft)
    wait(window.models_loaded)

    from gui_timer import GapTimer

    timer = GapTimer()
    gaps = timer.gaps
    timer.start()
    started = time.monotonic()
    last_sample = started

    def sample(final: bool = False) -> None:
        nonlocal last_sample
        gc.collect()
        wal = db.with_name(db.name + "-wal")
        size = db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        record(
            "sample",
            t=round(time.monotonic() - started, 1),
            replies=replies,
            rss_mb=round(_rss_mb(), 1),
            objects=len(gc.get_objects()),
            db_kb=round(size / 1024, 1),
            threads=_threads(),
            worst_gap_ms=round(max(gaps), 1) if gaps else 0.0,
            final=final,
        )
        gaps.clear()
        last_sample = time.monotonic()

    def expect_current() -> None:
        if window.conversation_id is not None:
            messages = [[m.role, m.content, [a.name for a in m.attachments]] for m in window.transcript.messages]
            record("expect", cid=window.conversation_id, messages=messages)

    replies = 0
    reasons: dict[str, int] = {}

    def reply(action: Callable[[], None], *, stop_early: bool = False) -> None:
        nonlocal replies
        stopper = None
        if stop_early:

            def stopper(batch: list[object]) -> None:
                window.stop()

            window.chat.events_folded.connect(stopper)
        action()
        if window.streaming:
            (finished,) = wait(window.reply_finished)
            reason = finished.reason.value  # type: ignore[attr-defined]
        else:
            reason = "not started"
        if stopper is not None:
            window.chat.events_folded.disconnect(stopper)
        reasons[reason] = reasons.get(reason, 0) + 1
        replies += 1
        expect_current()

    def send(text: str) -> None:
        window.composer.setPlainText(text)
        window.composer.send()

    files = write_attachments(workdir / "attach")
    attached = {"sent": 0, "cut": 0, "refused": 0}

    def send_with_file(text: str, path: Path) -> None:
        window.files.attach_paths([str(path)])
        send(text)
        box = window.files.fit_box  # asked when the conversation leaves no room for the file
        if box is None:
            attached["sent"] += 1
            return
        cut = next((b for b in box.buttons() if b.text() == "Attach the cut"), None)
        if cut is not None:
            attached["cut"] += 1
            cut.click()  # sends the message with the file's first part
        else:
            attached["refused"] += 1
            box.buttons()[0].click()
            window.files.clear()
            window.composer.clear()

    hub_every = max(1, args.replies // args.hub_actions) if args.hub_actions else 0
    hub_done = 0

    worst: dict[str, float] = {}  # the worst GUI-timer gap during each kind of action

    def timed(kind: str, before: int) -> None:
        from PySide6.QtTest import QTest

        QTest.qWait(30)  # the timer ticks: a stall at the action's end is counted as this action's
        if len(gaps) > before:
            worst[kind] = max(worst.get(kind, 0.0), *gaps[before:])

    while replies < args.replies:
        if hub_every and hub_done < args.hub_actions and replies >= (hub_done + 1) * hub_every - hub_every // 2:
            before = len(gaps)
            record("hub", **hub_action(window, hub_done))
            timed("hub visit", before)
            hub_done += 1
        before = len(gaps)
        roll = rng.random()
        prompt = rng.choice(PROMPTS)
        if roll < 0.08:
            kind = "new conversation"
            window.new_conversation()
            reply(functools.partial(send, prompt))
        elif roll < 0.16 and len(store.conversations()) > 1:
            kind = "switch"
            others = [c.id for c in store.conversations() if c.id != window.conversation_id]
            window.chat.open_conversation(rng.choice(others))
            reply(functools.partial(send, prompt))
        elif roll < 0.28 and window.page.regenerate_button.isEnabled() and window.transcript.messages:
            kind = "regenerate"
            reply(window.regenerate)
        elif roll < 0.36:
            kind = "stop"
            reply(functools.partial(send, prompt), stop_early=True)
        elif roll < 0.42:
            kind = "edit"
            users = [i for i, m in enumerate(window.transcript.messages) if m.role == "user"]
            if users:
                window.edit_message(rng.choice(users))
                reply(functools.partial(send, prompt + " Keep it short."))
        elif roll < 0.48:
            kind = "near the context limit"
            reply(lambda: send("word " * rng.choice([380, 420, 470])))  # near or over the 512-token context
        elif roll < 0.52 and len(store.conversations()) > 2:
            kind = "delete"
            victim = rng.choice([c.id for c in store.conversations() if c.id != window.conversation_id])
            window.chat.delete_conversation(victim)
            record("deleted", cid=victim)
        elif roll < 0.62:
            kind = "attach"
            reply(functools.partial(send_with_file, rng.choice(["Summarise the file.", prompt]), rng.choice(files)))
        else:
            kind = "send"
            if rng.random() < 0.3:
                window.controls.auto_depth.setChecked(rng.random() < 0.5)
                window.controls.depth_slider.setValue(rng.randint(0, 16))
            reply(functools.partial(send, prompt))
        timed(kind, before)
        if time.monotonic() - last_sample >= args.interval:
            sample()
    while hub_done < args.hub_actions:  # a short session still visits the hub as often as asked
        before = len(gaps)
        record("hub", **hub_action(window, hub_done))
        timed("hub visit", before)
        hub_done += 1
    timer.stop()
    sample(final=True)
    record("reasons", reasons=reasons)
    record("attached", **attached)
    record("worst", by_kind={k: round(v, 1) for k, v in worst.items()})
    from specchat.ui.model_picker import ModelPickerDialog

    record("pickers_alive", count=len(window.findChildren(ModelPickerDialog)))
    window.close()
    store.close()
    out.close()
    app.quit()
    return 0


def parent(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="specchat-soak-"))
    env = dict(os.environ)
    for name in ("CONFIG", "CACHE"):
        env.setdefault(f"SPECCHAT_{name}_DIR", str(workdir / name.lower()))
    cmd = [
        sys.executable,
        __file__,
        "--child",
        str(workdir),
        "--replies",
        str(args.replies),
        "--max-tokens",
        str(args.max_tokens),
        "--seed",
        str(args.seed),
        "--interval",
        str(args.interval),
        "--hub-actions",
        str(args.hub_actions),
    ]
    with serve_stocked(workdir) as stocked:
        hub_env(env, stocked.hub, workdir)
        started = time.monotonic()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
        lines = [json.loads(x) for x in (workdir / "soak.jsonl").read_text(encoding="utf-8").splitlines()]
        hub_actions = [x for x in lines if x["kind"] == "hub"]
        hub_problems = check_downloads(stocked, hub_actions)
        resumed = [resumed_kib(stocked, a["cancelled_file"]) for a in hub_actions if a["cancelled"]]
        hub_requests = len(stocked.hub.requests)
    stderr = [
        line
        for line in proc.stderr.splitlines()
        if line.strip() and not any(n in line for n in QT_NOISE) and not line.startswith("INFO ")
    ]
    samples = [x for x in lines if x["kind"] == "sample"]
    print(f"soak: {args.replies} replies, max {args.max_tokens} tokens, seed {args.seed}, {wall:.0f} s wall")
    print(f"{'t (s)':>7} {'replies':>7} {'RSS MB':>7} {'objects':>8} {'DB KB':>7} {'threads':>7} {'worst gap ms':>12}")
    for s in samples:
        print(
            f"{s['t']:>7} {s['replies']:>7} {s['rss_mb']:>7} {s['objects']:>8} {s['db_kb']:>7} {s['threads']:>7} "
            f"{s['worst_gap_ms']:>12}"
        )
    reasons: dict[str, int] = next((x["reasons"] for x in lines if x["kind"] == "reasons"), {})
    print("replies by finish reason:", ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())))
    attached: dict[str, int] = next((x for x in lines if x["kind"] == "attached"), {})
    print(
        f"attachments: {attached.get('sent', 0)} messages sent with a file, {attached.get('cut', 0)} with a cut "
        f"file, {attached.get('refused', 0)} refused for want of room"
    )
    downloaded = [a for a in hub_actions if a["outcome"] == "downloaded"]
    tried_cancel = [a for a in hub_actions if "cancelled_file" in a]
    print(
        f"hub: {len(hub_actions)} picker visits (search, files, download, close), {len(downloaded)} downloads "
        f"completed, {sum(a['cancelled'] for a in hub_actions)} of {len(tried_cancel)} cancelled after the first "
        f"progress and resumed (from {', '.join(f'{k} KiB' for k in resumed) or '-'}), {hub_requests} hub requests"
    )
    for a in hub_actions:
        print(
            f"    {a['repo']} {a['quant']}: {a['outcome']} in {a['seconds']} s (the dialog opened in "
            f"{a['opened_s']} s), {a['progress_steps']} progress "
            f"steps, {a.get('button', '-')!r}; {a['status']}"
        )
    for problem in hub_problems:
        print("   ", problem)
    by_kind: dict[str, float] = next((x["by_kind"] for x in lines if x["kind"] == "worst"), {})
    print("worst GUI gap (ms) by action:", ", ".join(f"{k} {v}" for k, v in sorted(by_kind.items())))
    pickers = next((x["count"] for x in lines if x["kind"] == "pickers_alive"), None)
    print(f"picker dialogs still alive after closing: {pickers}")
    print(f"exit code {proc.returncode}; stderr: {len(stderr)} lines" + ("" if not stderr else ":"))
    for line in stderr[:20]:
        print("   ", line)

    from specchat.core.chat.store import ConversationStore

    expected: dict[int, list[list[str]]] = {}
    for x in lines:
        if x["kind"] == "expect":
            expected[x["cid"]] = x["messages"]
        elif x["kind"] == "deleted":
            expected.pop(x["cid"], None)
    store = ConversationStore(workdir / "conversations.sqlite3")
    missing = 0
    total = 0
    for cid, msgs in expected.items():
        stored = [[m.role, m.content, [a.name for a in m.attachments]] for m in store.messages(cid)]
        total += len(msgs)
        if stored != msgs:
            missing += 1
            print(f"conversation {cid}: shown {msgs!r}\n  stored {stored!r}")
    store.close()
    print(
        f"saved messages: {total} in {len(expected)} conversations, "
        + ("all present" if not missing else f"{missing} conversations differ")
    )
    ok = (
        proc.returncode == 0
        and not stderr
        and not missing
        and len(samples) > 1
        and not hub_problems
        and len(hub_actions) == args.hub_actions
    )
    print("soak:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=150)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--hub-actions", type=int, default=4, help="visits to the picker's hub search (0: none)")
    parser.add_argument("--child", metavar="WORKDIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args, Path(args.child))
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
