"""Schema 6: pinned conversations list first and stay pinned; a schema-5 file migrates; duplicate and branch."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from specchat.core.chat.store import SCHEMA_VERSION, ConversationStore, ReplyWriter, StoreError
from specchat.core.types import Finished, FinishReason, GenerationStats
from support.xray import xray_round

# The conversations table as specchat wrote it at schema 5 (before pins), verbatim; the rest is unchanged.
_SCHEMA_5 = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    leaf_id INTEGER,
    system_prompt TEXT NOT NULL DEFAULT '',
    sampler TEXT
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    position INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, finish_reason TEXT, stats TEXT,
    created REAL NOT NULL
);
CREATE TABLE spans (
    id INTEGER PRIMARY KEY,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL, round INTEGER NOT NULL,
    target_prob REAL, draft_prob REAL, detail TEXT
);
INSERT INTO schema_version VALUES (5);
INSERT INTO conversations VALUES (1, 'older', 1.0, 10.0, 2, '', NULL);
INSERT INTO conversations VALUES (2, 'newer', 2.0, 20.0, NULL, 'Be brief.', '{"temperature": 0.2}');
INSERT INTO messages VALUES (1, 1, NULL, 0, 'user', 'hi', NULL, NULL, 1.0);
INSERT INTO messages VALUES (2, 1, 1, 1, 'assistant', 'hello', 'eos', '{"generated": 1}', 1.1);
INSERT INTO spans VALUES (1, 2, 0, 'accepted', 'hello', 0, 0.9, 0.8, NULL);
"""

_CUT = "Describe the famous painting by experts in art history and what it means"


def test_titles_cut_mid_word_by_the_old_rule_are_cut_at_a_word_on_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA_5)
    old_title = _CUT[:48]
    assert old_title.endswith(" h")  # cut inside "history"
    renamed = "My own title that happens to be 48 characters..."
    assert len(renamed) == 48
    db.execute("INSERT INTO conversations VALUES (3, ?, 3.0, 3.0, 3, '', NULL)", (old_title,))
    db.execute("INSERT INTO messages VALUES (3, 3, NULL, 0, 'user', ?, NULL, NULL, 3.0)", (_CUT,))
    db.execute("INSERT INTO conversations VALUES (4, ?, 4.0, 4.0, 4, '', NULL)", (renamed,))
    db.execute("INSERT INTO messages VALUES (4, 4, NULL, 0, 'user', ?, NULL, NULL, 4.0)", (_CUT + " again",))
    db.commit()
    db.close()
    store = ConversationStore(path)
    assert store.conversation(3).title == "Describe the famous painting by experts in art\u2026"
    assert store.conversation(4).title == renamed  # a title the user gave stays
    assert store.conversation(1).title == "older"
    store.close()


def test_a_schema_5_file_migrates_unpinned_and_a_pin_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA_5)
    db.close()
    store = ConversationStore(path)
    assert store.notice == ""
    listed = store.conversations()
    assert [(c.id, c.title, c.pinned) for c in listed] == [(2, "newer", False), (1, "older", False)]
    assert [m.content for m in store.messages(1)] == ["hi", "hello"]
    assert store.messages(1)[1].spans[0].text == "hello"
    store.set_pinned(1, True)
    store.close()
    assert sqlite3.connect(path).execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 7
    reopened = ConversationStore(path)
    assert [(c.id, c.pinned) for c in reopened.conversations()] == [(1, True), (2, False)]
    assert reopened.conversation(1).pinned and not reopened.conversation(2).pinned
    reopened.set_pinned(1, False)
    assert [c.id for c in reopened.conversations()] == [2, 1]  # back in its place by its last change
    reopened.close()


def _chat(store: ConversationStore) -> int:
    """A conversation: hi / reply (two versions, the second shown) / and? / reply."""
    cid = store.create_conversation("Hi there", system_prompt="Be brief.")
    store.add_message(cid, "user", "hi")
    for version in range(2):
        writer = ReplyWriter(store, cid, keep=1 if version else None)
        writer.feed(xray_round(1, 1, correction=51, number=0))
        writer.feed(Finished(FinishReason.EOS, GenerationStats(rounds=1, drafted=2, accepted=1, generated=2)))
    store.add_message(cid, "user", "and?")
    writer = ReplyWriter(store, cid)
    writer.feed(xray_round(2, 0, correction=52, number=0))
    writer.feed(Finished(FinishReason.EOS, GenerationStats(rounds=1, drafted=2, accepted=2, generated=3)))
    return cid


def _shown(store: ConversationStore, cid: int) -> list[tuple[str, str, int, int, int]]:
    return [(m.role, m.content, m.version, m.versions, len(m.spans)) for m in store.messages(cid)]


def test_duplicate_copies_every_version_spans_and_settings(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = _chat(store)
    store.set_pinned(cid, True)
    copy = store.duplicate(cid)
    assert copy != cid
    info = store.conversation(copy)
    assert (info.title, info.system_prompt, info.pinned) == ("Hi there (copy)", "Be brief.", False)
    assert _shown(store, copy) == _shown(store, cid)
    assert [s.detail for s in store.messages(copy)[1].spans] == [s.detail for s in store.messages(cid)[1].spans]
    first_reply = store.messages(copy)[1]
    assert first_reply.versions == 2 and store.switch_version(copy, first_reply.id, -1)
    assert len(store.messages(copy)) == 2  # the first version had no follow-up
    assert len(store.messages(cid)) == 4  # the original is as it was
    store.delete(cid)
    assert len(store.messages(copy)) == 2  # the copy owns its messages
    store.close()


def test_branch_keeps_the_path_up_to_the_chosen_message(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    store = ConversationStore(path)
    cid = _chat(store)
    shown = store.messages(cid)
    branch = store.branch(cid, shown[1].id)
    assert store.conversation(branch).title == "Hi there (branch)"
    copied = store.messages(branch)
    assert [(m.role, m.content, m.versions) for m in copied] == [(m.role, m.content, 1) for m in shown[:2]]
    assert copied[1].stats == shown[1].stats and len(copied[1].spans) == len(shown[1].spans)
    store.add_message(branch, "user", "a new question")  # it goes on from the branch point
    assert [m.content for m in store.messages(branch)][-1] == "a new question"
    assert len(store.messages(cid)) == 4
    with pytest.raises(StoreError):
        store.branch(cid, 10_000)  # not on the path: one clear error, nothing added
    assert len(store.conversations()) == 2
    store.close()
    assert [c.id for c in ConversationStore(path).conversations()][0] == branch  # the newest, kept
