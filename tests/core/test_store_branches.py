"""Regenerated replies and edited messages are versions you can flip between, stored with their fates."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from specchat.core.chat.store import SCHEMA_VERSION, ConversationStore, ReplyWriter
from specchat.core.types import Finished, FinishReason, GenerationStats
from support.events import verified


def _reply(store: ConversationStore, cid: int, text: str, *, keep: int | None = None, user: str | None = None) -> None:
    writer = ReplyWriter(store, cid, keep=keep, user_text=user)
    writer.feed(verified(0, (text[:-1],), ("x",), text[-1]))
    writer.feed(Finished(FinishReason.EOS, GenerationStats(rounds=1, drafted=2, accepted=1, generated=2)))


def _shown(store: ConversationStore, cid: int) -> list[tuple[str, int, int]]:
    return [(m.content, m.version, m.versions) for m in store.messages(cid)]


def test_regenerate_keeps_the_earlier_reply_as_a_version(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = store.create_conversation("q")
    store.add_message(cid, "user", "question")
    _reply(store, cid, "first")
    _reply(store, cid, "second", keep=1)
    _reply(store, cid, "third", keep=1)
    assert _shown(store, cid) == [("question", 1, 1), ("third", 3, 3)]
    reply = store.messages(cid)[-1]
    assert store.switch_version(cid, reply.id, -1)
    assert _shown(store, cid) == [("question", 1, 1), ("second", 2, 3)]
    assert [s.kind.value for s in store.messages(cid)[-1].spans] == ["accepted", "rejected", "target"]
    assert not store.switch_version(cid, store.messages(cid)[-1].id, +5)
    store.close()
    reopened = ConversationStore(tmp_path / "c.sqlite3")  # the choice survives a restart
    assert _shown(reopened, cid) == [("question", 1, 1), ("second", 2, 3)]
    reopened.close()


def test_an_edit_branches_and_each_branch_keeps_its_own_tail(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = store.create_conversation("q")
    store.add_message(cid, "user", "one")
    _reply(store, cid, "A1")
    store.add_message(cid, "user", "two")
    _reply(store, cid, "A2")
    _reply(store, cid, "B1", keep=0, user="one, edited")  # edit the first message
    assert _shown(store, cid) == [("one, edited", 2, 2), ("B1", 1, 1)]
    first = store.messages(cid)[0]
    store.switch_version(cid, first.id, -1)  # back to the original: its whole tail is there
    assert [c for c, _, _ in _shown(store, cid)] == ["one", "A1", "two", "A2"]
    store.close()


def test_a_schema_1_database_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (1);
        CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL,
                                    updated REAL NOT NULL);
        CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL, position INTEGER NOT NULL,
                               role TEXT NOT NULL, content TEXT NOT NULL, finish_reason TEXT, stats TEXT,
                               created REAL NOT NULL);
        CREATE TABLE spans (id INTEGER PRIMARY KEY, message_id INTEGER NOT NULL, seq INTEGER NOT NULL,
                            kind TEXT NOT NULL, text TEXT NOT NULL, round INTEGER NOT NULL, target_prob REAL,
                            draft_prob REAL);
        INSERT INTO conversations VALUES (1, 'old chat', 0, 0);
        INSERT INTO messages VALUES (1, 1, 0, 'user', 'hi', NULL, NULL, 0);
        INSERT INTO messages VALUES (2, 1, 1, 'assistant', 'hello', 'eos', NULL, 0);
        INSERT INTO messages VALUES (3, 1, 2, 'user', 'and?', NULL, NULL, 0);
    """)
    db.close()
    store = ConversationStore(path)
    assert store.notice == ""
    assert [m.content for m in store.messages(1)] == ["hi", "hello", "and?"]
    _reply(store, 1, "more")
    assert [m.content for m in store.messages(1)] == ["hi", "hello", "and?", "more"]
    store.close()
    version = sqlite3.connect(path).execute("SELECT version FROM schema_version").fetchone()[0]
    assert (
        version == SCHEMA_VERSION == 7
    )  # through 2 (branches), 3 (details), 4 (search), 5 (samplers), 6 (pins), 7 (files)


def test_each_conversation_keeps_its_system_prompt(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = store.create_conversation("q", "Answer in French.")
    other = store.create_conversation("r")
    store.set_system_prompt(other, "Be brief.")
    assert store.conversation(cid).system_prompt == "Answer in French."
    assert {c.id: c.system_prompt for c in store.conversations()} == {cid: "Answer in French.", other: "Be brief."}
    assert '"system_prompt": "Answer in French."' in store.export_json(cid)
    assert "**System**\n\nAnswer in French." in store.export_markdown(cid)
    store.close()
