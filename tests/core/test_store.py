"""The conversation store: a real SQLite file, streamed rounds, reload, export, a corrupt file."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from specchat.core import paths
from specchat.core.chat.store import DB_FILENAME, SCHEMA_VERSION, ConversationStore, ReplyWriter, TokenSpan, spans_of
from specchat.core.types import Finished, FinishReason, GenerationStats, TokenKind, Verified


def _round(n: int, acc: tuple[str, ...], rej: tuple[str, ...], corr: str) -> Verified:
    k = len(acc) + len(rej)
    return Verified(
        round=n,
        depth=k,
        accepted=tuple(range(len(acc))),
        rejected=tuple(range(len(rej))),
        correction=99,
        accepted_pieces=acc,
        rejected_pieces=rej,
        correction_piece=corr,
        target_probs=tuple(0.9 for _ in range(k)),
        draft_probs=tuple(0.5 for _ in range(k)),
        correction_prob=0.7,
    )


def test_spans_of_orders_accepted_rejected_then_target() -> None:
    spans = spans_of(_round(3, ("Hel", "lo"), ("!",), ","))
    assert [s.kind for s in spans] == [TokenKind.ACCEPTED, TokenKind.ACCEPTED, TokenKind.REJECTED, TokenKind.TARGET]
    assert [s.text for s in spans] == ["Hel", "lo", "!", ","]
    assert spans[0].round == 3 and spans[0].target_prob == 0.9 and spans[0].draft_prob == 0.5
    assert spans[-1].target_prob == 0.7 and spans[-1].draft_prob is None


def test_store_is_wal_and_in_the_data_dir() -> None:
    store = ConversationStore()
    assert store.path == paths.data_dir() / DB_FILENAME
    mode = sqlite3.connect(store.path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    version = sqlite3.connect(store.path).execute("SELECT version FROM schema_version").fetchone()[0]
    assert version == SCHEMA_VERSION
    store.close()


def test_streamed_reply_is_committed_per_round_and_reloads() -> None:
    store = ConversationStore()
    cid = store.create_conversation("Greeting")
    store.add_message(cid, "user", "Say hello")
    writer = ReplyWriter(store, cid)
    writer.feed(_round(0, ("Hel", "lo"), ("!",), ","))
    # another connection sees the first round before the reply finishes
    other = ConversationStore(store.path)
    partial = other.messages(cid)[-1]
    assert partial.content == "Hello," and len(partial.spans) == 4
    other.close()
    writer.feed(_round(1, (), (), " world"))
    stats = GenerationStats(rounds=2, drafted=3, accepted=2, generated=4, generate_seconds=0.5)
    writer.feed(Finished(FinishReason.EOS, stats))
    store.close()

    reloaded = ConversationStore()
    msgs = reloaded.messages(cid)
    assert [m.role for m in msgs] == ["user", "assistant"]
    reply = msgs[1]
    assert reply.content == "Hello, world"
    assert reply.finish_reason == "eos"
    assert reply.stats is not None and reply.stats["accepted"] == 2
    assert reply.spans is not None and reply.spans[2] == TokenSpan(TokenKind.REJECTED, "!", 0, 0.9, 0.5)
    assert reply.spans[-1].kind is TokenKind.TARGET and reply.spans[-1].text == " world"
    reloaded.close()


def test_rename_delete_truncate_and_order() -> None:
    store = ConversationStore()
    a = store.create_conversation("a")
    b = store.create_conversation("b")
    store.add_message(a, "user", "x")  # touches a: most recent first
    assert [c.id for c in store.conversations()] == [a, b]
    store.rename(b, "renamed")
    assert store.conversation(b).title == "renamed"
    store.add_message(a, "assistant", "y")
    store.add_message(a, "user", "z")
    store.truncate(a, 1)
    assert [m.content for m in store.messages(a)] == ["x"]
    store.delete(a)
    assert [c.id for c in store.conversations()] == [b]
    store.close()


def test_export_markdown_and_json() -> None:
    store = ConversationStore()
    cid = store.create_conversation("Export me")
    store.add_message(cid, "user", "Hi")
    writer = ReplyWriter(store, cid)
    writer.feed(_round(0, ("Hey",), ("yo",), "!"))
    writer.feed(Finished(FinishReason.MAX_TOKENS, GenerationStats(rounds=1, drafted=2, accepted=1, generated=2)))
    md = store.export_markdown(cid)
    assert md.startswith("# Export me")
    assert "**User**\n\nHi" in md and "**Assistant**\n\nHey!" in md
    assert "acceptance 50%" in md and "0.5" not in md  # a percentage, as the window shows it
    data = json.loads(store.export_json(cid))
    assert data["title"] == "Export me"
    assert data["messages"][1]["content"] == "Hey!"
    assert [s["kind"] for s in data["messages"][1]["spans"]] == ["accepted", "rejected", "target"]
    store.close()


def test_corrupt_database_is_kept_aside_with_a_one_line_notice() -> None:
    db_path = paths.data_dir() / DB_FILENAME
    garbage = b"this is not a sqlite database at all" * 100
    db_path.write_bytes(garbage)
    store = ConversationStore()
    assert store.notice and "\n" not in store.notice
    assert "could not be read" in store.notice
    kept = [p for p in db_path.parent.iterdir() if p.name.startswith(DB_FILENAME + ".unreadable-")]
    assert len(kept) == 1 and kept[0].read_bytes() == garbage
    cid = store.create_conversation("still works")
    assert store.conversation(cid).title == "still works"
    store.close()


def test_a_healthy_database_gives_no_notice(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    assert store.notice == ""
    store.close()


def test_an_unopenable_path_is_left_alone_and_the_store_works_in_memory(tmp_path: Path) -> None:
    folder = tmp_path / "not-a-file.sqlite3"
    folder.mkdir()
    store = ConversationStore(folder)
    assert "could not be opened" in store.notice and "\n" not in store.notice
    cid = store.create_conversation("temporary")
    assert store.conversation(cid).title == "temporary"
    assert folder.is_dir() and not list(tmp_path.glob("*.unreadable-*"))
    store.close()


def test_a_newer_schema_is_set_aside() -> None:
    store = ConversationStore()
    store._db.execute("UPDATE schema_version SET version = 99")
    store.close()
    again = ConversationStore()
    assert "newer" in again.notice
    again.close()
