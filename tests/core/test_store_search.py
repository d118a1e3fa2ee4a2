"""Schema 4: conversation search over titles and message text (SQLite FTS5, LIKE without it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from specchat.core.chat import store_schema
from specchat.core.chat.store import SCHEMA_VERSION, ConversationStore, ReplyWriter
from specchat.core.types import Finished, FinishReason, GenerationStats
from support.xray import xray_round

# The schema as specchat wrote it at version 3 (store.py before search), verbatim, with a few rows.
_SCHEMA_3 = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    leaf_id INTEGER,
    system_prompt TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    finish_reason TEXT,
    stats TEXT,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, position);
CREATE TABLE IF NOT EXISTS spans (
    id INTEGER PRIMARY KEY,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    round INTEGER NOT NULL,
    target_prob REAL,
    draft_prob REAL,
    detail TEXT
);
CREATE INDEX IF NOT EXISTS spans_by_message ON spans(message_id, seq);
INSERT INTO schema_version VALUES (3);
INSERT INTO conversations VALUES (1, 'Trip to Lisbon', 1.0, 2.0, 2, '');
INSERT INTO conversations VALUES (2, 'Sorting', 1.0, 5.0, 4, '');
INSERT INTO messages VALUES (1, 1, NULL, 0, 'user', 'where to eat pastel de nata', NULL, NULL, 1.0);
INSERT INTO messages VALUES (2, 1, 1, 1, 'assistant', 'try the bakery in Belem', 'eos', NULL, 1.1);
INSERT INTO messages VALUES (3, 2, NULL, 0, 'user', 'sort a list in python', NULL, NULL, 1.0);
INSERT INTO messages VALUES (4, 2, 3, 1, 'assistant', 'use sorted() on the bakery list', 'eos', NULL, 1.1);
"""

HOSTILE = [
    '"',
    '""',
    'say "hi',
    "*",
    "a*",
    "NEAR",
    "NEAR(a b, 2)",
    "-bakery",
    "bakery -python",
    "(",
    ")",
    "a) OR (b",
    "((",
    "AND",
    "OR NOT",
    "^start",
    "text:bakery",
    "col:",
    "'",
    "%",
    "_",
    "\\",
    'a"b*c',
    "   ",
    "",
    "\x00",
    "🙂",
    "NOT bakery",
]


@pytest.fixture(params=[True, False], ids=["fts5", "like"])
def fts5(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Each test runs with FTS5 and with the LIKE fallback of a build without it."""
    if not request.param:
        monkeypatch.setattr(store_schema, "_has_fts5", lambda db: False)
    elif not store_schema._has_fts5(sqlite3.connect(":memory:")):
        pytest.skip("this SQLite build has no FTS5")
    return bool(request.param)


def _ids(store: ConversationStore, text: str) -> list[int]:
    return [cid for cid, _title, _snippet in store.search(text)]


def test_search_finds_by_title_and_by_text_newest_first(tmp_path: Path, fts5: bool) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    old = store.create_conversation("Lisbon trip")
    store.add_message(old, "user", "where is the best bakery?")
    new = store.create_conversation("Python help")
    store.add_message(new, "user", "which bakery sells rye bread")
    assert store.search("lisbon") == [(old, "Lisbon trip", "Lisbon trip")]
    ((cid, title, snippet),) = store.search("rye")
    assert (cid, title) == (new, "Python help") and "rye bread" in snippet
    assert _ids(store, "bakery") == [new, old]  # the most recently updated first, each once
    assert _ids(store, "BAKERY") == [new, old]
    store.add_message(old, "assistant", "the bakery by the river")  # now the older one was updated last
    assert _ids(store, "bakery") == [old, new]
    assert _ids(store, "") == _ids(store, "  ") == []
    assert _ids(store, "nothing-like-this") == []
    store.close()


def test_search_follows_deletes_renames_and_streamed_replies(tmp_path: Path, fts5: bool) -> None:
    path = tmp_path / "c.sqlite3"
    store = ConversationStore(path)
    cid = store.create_conversation("Sourdough")
    store.add_message(cid, "user", "how long to proof")
    writer = ReplyWriter(store, cid)
    writer.feed(xray_round(1, 1, correction=51))  # the reply's text grows round by round
    writer.feed(Finished(FinishReason.EOS, GenerationStats(rounds=1, drafted=2, accepted=1, generated=2)))
    reply = store.messages(cid)[-1].content
    assert reply and _ids(store, reply.split()[0]) == [cid]
    store.rename(cid, "Rye")
    assert _ids(store, "sourdough") == [] and _ids(store, "rye") == [cid]
    other = store.create_conversation("Other")
    store.add_message(other, "user", "proof of work")
    assert sorted(_ids(store, "proof")) == sorted([cid, other])
    store.delete(cid)
    assert _ids(store, "proof") == [other]
    assert _ids(store, "rye") == []
    store.close()
    reopened = ConversationStore(path)  # the index is in the file, in step with it
    assert _ids(reopened, "proof") == [other] and _ids(reopened, "rye") == []
    reopened.close()


def test_hostile_queries_do_not_raise(tmp_path: Path, fts5: bool) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = store.create_conversation('A "quoted" title (with parens)')
    store.add_message(cid, "user", "NEAR the bakery - 50% off_peak a*b")
    for query in HOSTILE:
        result = store.search(query)
        assert isinstance(result, list), query
    assert _ids(store, '"quoted"') == [cid]  # quotes are text, not syntax
    assert _ids(store, "NEAR") == [cid]  # the word, not the operator
    assert _ids(store, "parens)") == [cid]
    store.close()


def test_a_schema_3_file_upgrades_and_is_searchable(tmp_path: Path, fts5: bool) -> None:
    path = tmp_path / "conversations.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA_3)
    db.close()
    store = ConversationStore(path)
    assert store.notice == ""
    assert _ids(store, "lisbon") == [1]  # a title stored before the index existed
    assert _ids(store, "nata") == [1]  # a message stored before the index existed
    assert _ids(store, "bakery") == [2, 1]
    assert [m.content for m in store.messages(1)] == ["where to eat pastel de nata", "try the bakery in Belem"]
    store.add_message(1, "user", "and a croissant")  # the upgraded file indexes new writes too
    assert _ids(store, "croissant") == [1]
    store.close()
    assert sqlite3.connect(path).execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 7


def test_a_file_written_without_fts5_is_indexed_when_reopened_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not store_schema._has_fts5(sqlite3.connect(":memory:")):
        pytest.skip("this SQLite build has no FTS5")
    path = tmp_path / "c.sqlite3"
    first = ConversationStore(path)  # with FTS5: index and triggers
    first.create_conversation("before")
    first.close()
    with monkeypatch.context() as m:
        m.setattr(store_schema, "_has_fts5", lambda db: False)
        plain = ConversationStore(path)  # a build without FTS5 drops the triggers and still writes
        cid = plain.create_conversation("during")
        plain.add_message(cid, "user", "written without the index")
        assert _ids(plain, "during") == [cid]
        plain.close()
    again = ConversationStore(path)
    assert _ids(again, "during") == [cid] and _ids(again, "index") == [cid] and len(_ids(again, "before")) == 1
    again.close()


def test_the_snippet_marks_each_matched_word(tmp_path: Path, fts5: bool) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = store.create_conversation("Recipes")
    store.add_message(cid, "user", "a long message about sourdough bread that rises slowly overnight in the fridge")
    ((found, title, snippet),) = store.search("sourdough", mark=("[", "]"))
    assert (found, title) == (cid, "Recipes") and "[sourdough]" in snippet
    assert snippet.replace("[", "").replace("]", "") == store.search("sourdough")[0][2]  # no marks: the same text
    if fts5:  # every term is marked, by prefix too
        ((_, _, both),) = store.search("sourd fridge", mark=("<", ">"))
        assert "<sourdough>" in both and "<fridge>" in both
    store.close()
