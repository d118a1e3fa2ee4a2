"""Replies are stored so that nothing on screen is ever lost: regenerate, edit, a crash mid-reply."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specchat.core.chat.store import ConversationStore, ReplyWriter
from specchat.core.chat.transcript import ReplyFigures
from specchat.core.types import Finished, FinishReason, GenerationStats
from support.events import drafted, verified


def _contents(path: Path, cid: int) -> list[tuple[str, str, str | None]]:
    """What another process would read now (a second connection to the same file)."""
    reader = ConversationStore(path)
    try:
        return [(m.role, m.content, m.finish_reason) for m in reader.messages(cid)]
    finally:
        reader.close()


def _answered(store: ConversationStore) -> int:
    cid = store.create_conversation("q")
    store.add_message(cid, "user", "question")
    writer = ReplyWriter(store, cid)
    writer.feed(verified(0, ("old",), (), " reply"))
    writer.feed(Finished(FinishReason.EOS, GenerationStats(rounds=1, drafted=1, accepted=1, generated=2)))
    return cid


def test_regenerate_keeps_the_old_reply_until_the_first_round(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    store = ConversationStore(path)
    cid = _answered(store)
    writer = ReplyWriter(store, cid, keep=1)
    writer.feed(drafted(0, ("n",)))
    assert _contents(path, cid) == [("user", "question", None), ("assistant", "old reply", "eos")]
    writer.feed(verified(0, ("new",), (), " one"))
    assert _contents(path, cid) == [("user", "question", None), ("assistant", "new one", None)]
    writer.feed(Finished(FinishReason.EOS, GenerationStats(rounds=1, drafted=1, accepted=1, generated=2)))
    assert _contents(path, cid)[-1] == ("assistant", "new one", "eos")
    store.close()


@pytest.mark.parametrize("reason", [FinishReason.CANCELLED, FinishReason.ERROR])
def test_a_regenerate_that_ends_before_its_first_round_changes_nothing(tmp_path: Path, reason: FinishReason) -> None:
    path = tmp_path / "c.sqlite3"
    store = ConversationStore(path)
    cid = _answered(store)
    writer = ReplyWriter(store, cid, keep=1)
    writer.feed(Finished(reason, GenerationStats(), "stopped"))
    assert writer.message_id is None
    assert _contents(path, cid) == [("user", "question", None), ("assistant", "old reply", "eos")]
    store.close()


def test_edit_and_resend_replaces_the_tail_in_one_transaction(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    store = ConversationStore(path)
    cid = _answered(store)
    store.add_message(cid, "user", "second")
    before = _contents(path, cid)
    writer = ReplyWriter(store, cid, keep=0, user_text="edited question")
    writer.feed(drafted(0, ("a",)))
    assert _contents(path, cid) == before
    writer.feed(verified(0, ("a",), (), "b"))
    assert _contents(path, cid) == [("user", "edited question", None), ("assistant", "ab", None)]
    store.close()


def test_a_new_reply_stopped_before_its_first_round_is_kept_as_stopped(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = store.create_conversation("q")
    store.add_message(cid, "user", "question")
    ReplyWriter(store, cid).feed(Finished(FinishReason.CANCELLED, GenerationStats()))
    assert [(m.role, m.finish_reason) for m in store.messages(cid)] == [("user", None), ("assistant", "cancelled")]
    # An error before any token leaves nothing behind (the window puts the message back in the composer).
    ReplyWriter(store, cid).feed(Finished(FinishReason.ERROR, GenerationStats(), "too long"))
    assert len(store.messages(cid)) == 2
    store.close()


def test_every_round_stores_the_figures_so_far(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = store.create_conversation("q")
    store.add_message(cid, "user", "question")
    writer = ReplyWriter(store, cid)
    writer.feed(verified(0, ("a", "b"), ("c",), "d"))
    writer.feed(verified(1, (), (), "e"))  # a round at depth 0 drafts nothing
    stats = store.messages(cid)[-1].stats
    assert stats is not None
    assert (stats["generated"], stats["drafted"], stats["accepted"], stats["rounds"]) == (4, 3, 2, 1)
    # The window's own Finished on close carries no engine figures: the counted ones stay.
    writer.feed(Finished(FinishReason.CANCELLED, GenerationStats(), "window closed"))
    stored = store.messages(cid)[-1]
    assert stored.finish_reason == "cancelled" and stored.stats is not None
    assert stored.stats["generated"] == 4 and stored.stats["message"] == "window closed"
    store.close()


def test_figures_count_like_the_engine_while_streaming_and_after() -> None:
    """The stats panel showed accepted/round 1.00 while streaming and 2.00 reopened: one count now."""
    events = [verified(0, ("a", "b"), (), "c"), verified(1, (), (), "d"), verified(2, ("e", "f"), (), "g")]
    live = ReplyFigures()
    live.fold(events)
    runtime = GenerationStats(rounds=2, drafted=4, accepted=4, generated=7, generate_seconds=1.0, depth=2)
    assert live.mean_accepted_per_round == runtime.mean_accepted_per_round == 2.0
    live.fold([Finished(FinishReason.EOS, runtime)])
    reopened = ReplyFigures.from_dict(live.as_dict())
    assert reopened.mean_accepted_per_round == live.mean_accepted_per_round
    assert (reopened.generated, reopened.drafted, reopened.accepted) == (7, 4, 4)
    assert reopened.final is not None and reopened.final.tokens_per_second == pytest.approx(7.0)


_KILLED_MID_REPLY = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from specchat.core.chat.store import ConversationStore, ReplyWriter
    from support.events import drafted, verified
    store = ConversationStore(__import__("pathlib").Path({db!r}))
    writer = ReplyWriter(store, {cid}, keep={keep})
    writer.feed(drafted(0, ("x",)))
    for n in range({rounds}):
        writer.feed(verified(n, ("new",), (), "!"))
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize("rounds", [0, 2])
def test_a_process_killed_mid_reply_loses_nothing_that_was_shown(tmp_path: Path, rounds: int) -> None:
    path = tmp_path / "c.sqlite3"
    store = ConversationStore(path)
    cid = _answered(store)
    store.close()
    tests = str(Path(__file__).resolve().parents[1])
    script = _KILLED_MID_REPLY.format(tests=tests, db=str(path), cid=cid, keep=1, rounds=rounds)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": tests},
    )
    assert proc.returncode == -9, proc.stderr
    after = _contents(path, cid)
    if rounds == 0:  # killed before the new reply's first round: the old one is still there, finished
        assert after == [("user", "question", None), ("assistant", "old reply", "eos")]
    else:  # the new reply's rounds are there, unfinished: the window shows it as cut short
        assert after == [("user", "question", None), ("assistant", "new!new!", None)]
        reader = ConversationStore(path)
        stats = reader.messages(cid)[-1].stats
        reader.close()
        assert stats is not None and stats["generated"] == 4
