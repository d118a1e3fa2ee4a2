"""Schema 3: every span's X-ray detail is stored with it, a schema-2 file migrates with all its data."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from specchat.core.chat.store import SCHEMA_VERSION, ConversationStore, ReplyWriter
from specchat.core.chat.transcript import TokenDetail, TokenSpan, spans_of
from specchat.core.types import DraftSource, Finished, FinishReason, GenerationStats, TokenKind, Verified
from support.xray import xray_round

# The schema as specchat wrote it at version 2 (store.py before the token details), verbatim.
_SCHEMA_2 = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL,
    leaf_id INTEGER, system_prompt TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    position INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, finish_reason TEXT, stats TEXT,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, position);
CREATE TABLE IF NOT EXISTS spans (
    id INTEGER PRIMARY KEY,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL, round INTEGER NOT NULL,
    target_prob REAL, draft_prob REAL
);
CREATE INDEX IF NOT EXISTS spans_by_message ON spans(message_id, seq);
INSERT INTO schema_version VALUES (2);
INSERT INTO conversations VALUES (1, 'old chat', 1.0, 2.0, 4, 'Be brief.');
INSERT INTO messages VALUES (1, 1, NULL, 0, 'user', 'hi', NULL, NULL, 1.0);
INSERT INTO messages VALUES (2, 1, 1, 1, 'assistant', 'hello there', 'eos', '{"generated": 3, "rounds": 1}', 1.1);
INSERT INTO messages VALUES (3, 1, 1, 1, 'assistant', 'hey', 'eos', NULL, 1.2);
INSERT INTO messages VALUES (4, 1, 3, 2, 'user', 'and?', NULL, NULL, 1.3);
INSERT INTO spans VALUES (1, 2, 0, 'accepted', 'hello', 0, 0.9, 0.8);
INSERT INTO spans VALUES (2, 2, 1, 'rejected', ' you', 0, 0.1, 0.7);
INSERT INTO spans VALUES (3, 2, 2, 'target', ' there', 0, 0.6, NULL);
INSERT INTO spans VALUES (4, 3, 0, 'target', 'hey', 0, 0.5, NULL);
"""


def _schema_2_file(path: Path) -> None:
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA_2)
    db.close()


def _spans(store: ConversationStore, cid: int, index: int) -> list[tuple[TokenSpan, TokenDetail | None]]:
    return [(s, s.detail) for s in store.messages(cid)[index].spans]


def test_a_schema_2_file_migrates_keeping_every_message_branch_and_span(tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    _schema_2_file(path)
    store = ConversationStore(path)
    assert store.notice == ""
    info = store.conversation(1)
    assert (info.title, info.system_prompt) == ("old chat", "Be brief.")
    shown = store.messages(1)
    assert [(m.role, m.content, m.version, m.versions) for m in shown] == [
        ("user", "hi", 1, 1),
        ("assistant", "hey", 2, 2),
        ("user", "and?", 1, 1),
    ]
    assert store.switch_version(1, shown[1].id, -1)
    old = store.messages(1)[1]
    assert old.content == "hello there" and old.stats == {"generated": 3, "rounds": 1}
    assert [(s.kind, s.text, s.round, s.target_prob, s.draft_prob, s.detail) for s in old.spans] == [
        (TokenKind.ACCEPTED, "hello", 0, 0.9, 0.8, None),
        (TokenKind.REJECTED, " you", 0, 0.1, 0.7, None),
        (TokenKind.TARGET, " there", 0, 0.6, None, None),
    ]
    # The migrated file takes replies with details like a new one.
    writer = ReplyWriter(store, 1)
    writer.feed(xray_round(1, 1, correction=51))
    writer.feed(Finished(FinishReason.EOS, GenerationStats(rounds=1, drafted=2, accepted=1, generated=2)))
    store.close()
    assert sqlite3.connect(path).execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 7
    reopened = ConversationStore(path)
    details = [s.detail for s in reopened.messages(1)[-1].spans]
    assert [d.position if d else None for d in details] == [1, 2, 0]
    reopened.close()


def test_details_survive_a_reopen_exactly(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    store = ConversationStore(path)
    cid = store.create_conversation("q")
    store.add_message(cid, "user", "question")
    rounds = [xray_round(1, 2, correction=51, number=0), xray_round(2, 0, correction=52, number=1)]
    writer = ReplyWriter(store, cid)
    for event in rounds:
        writer.feed(event)
    writer.feed(Finished(FinishReason.EOS, GenerationStats(rounds=2, drafted=5, accepted=3, generated=5)))
    store.close()
    expected = [s.detail for event in rounds for s in spans_of(event)]
    reopened = ConversationStore(path)
    reply = reopened.messages(cid)[-1]
    reopened.close()
    assert [s.detail for s in reply.spans] == expected
    first = reply.spans[0].detail
    assert first is not None and (first.source, first.match_length, first.target_top) == (
        DraftSource.LOOKUP,
        4,
        (("t0", 0.6), ("d0", 0.3)),
    )
    assert reply.stats is not None and reply.stats["positions"] == [[2, 2], [2, 1]]


def test_the_json_export_carries_each_tokens_detail(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = store.create_conversation("q")
    store.add_message(cid, "user", "question")
    writer = ReplyWriter(store, cid)
    writer.feed(xray_round(1, 2, correction=51, number=0))
    writer.feed(Finished(FinishReason.EOS, GenerationStats(rounds=1, drafted=3, accepted=1, generated=2)))
    exported = json.loads(store.export_json(cid))
    store.close()
    reply = exported["messages"][-1]
    first = reply["spans"][0]["detail"]
    assert (first["position"], first["source"], first["match_length"]) == (1, "lookup", 4)
    assert first["target_top"] == [["t0", 0.6], ["d0", 0.3]]
    assert reply["spans"][-1]["detail"]["position"] == 0  # the target's own token


def _round_of(n_drafts: int, number: int) -> Verified:
    """A round with full 5-entry lists on both sides, of typical token texts."""
    top = tuple((i, 0.123456, f" w{i:03d}") for i in range(5))
    return Verified(
        round=number,
        depth=n_drafts,
        accepted=tuple(range(n_drafts)),
        rejected=(),
        correction=7,
        accepted_pieces=tuple(" tok" for _ in range(n_drafts)),
        rejected_pieces=(),
        correction_piece=" end",
        target_probs=(0.5,) * n_drafts,
        draft_probs=(0.5,) * n_drafts,
        sources=(DraftSource.MODEL,) * n_drafts,
        match_lengths=(0,) * n_drafts,
        target_top=(top,) * (n_drafts + 1),
        draft_top=(top,) * n_drafts,
        greedy=True,
    )


def test_a_500_token_reply_keeps_its_details_small(tmp_path: Path) -> None:
    """Worst case: every position lists five alternatives on both sides (real replies list fewer)."""
    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = store.create_conversation("q")
    store.add_message(cid, "user", "question")
    writer = ReplyWriter(store, cid)
    for n in range(100):
        writer.feed(_round_of(4, n))
    message_id = writer.message_id
    count, size = store._db.execute(
        "SELECT count(*), sum(length(CAST(detail AS BLOB))) FROM spans WHERE message_id = ?", (message_id,)
    ).fetchone()
    store.close()
    assert count == 500
    assert size < 100_000  # about 190 bytes a token
    assert size / count < 200


_KILLED = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from specchat.core.chat.store import ConversationStore, ReplyWriter
    from support.xray import xray_round
    store = ConversationStore(Path({db!r}))
    cid = store.create_conversation("q")
    store.add_message(cid, "user", "question")
    writer = ReplyWriter(store, cid)
    writer.feed(xray_round(1, 1, correction=51, number=0))
    writer.feed(xray_round(2, 0, correction=52, number=1))
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_process_killed_mid_reply_keeps_the_details_of_every_stored_round(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    tests = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED.format(tests=tests, db=str(path))],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": tests},
    )
    assert proc.returncode == -9, proc.stderr
    store = ConversationStore(path)
    reply = store.messages(1)[-1]
    store.close()
    assert [(s.text, s.detail.position if s.detail else None) for s in reply.spans] == [
        ("d0", 1),
        ("d1", 2),
        ("t1", 0),
        ("d0", 1),
        ("d1", 2),
        ("t2", 0),
    ]
    assert reply.finish_reason is None  # cut short, as the window shows it


def test_an_unreadable_detail_loads_as_none_and_the_span_stays(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    store = ConversationStore(path)
    cid = store.create_conversation("q")
    writer = ReplyWriter(store, cid)
    writer.feed(xray_round(1, 0, correction=51))
    store._db.execute("UPDATE spans SET detail = 'not json' WHERE seq = 0")
    store._db.execute("UPDATE spans SET detail = ? WHERE seq = 1", (json.dumps({"x": 1}),))
    spans = store.messages(cid)[-1].spans
    store.close()
    assert [(s.text, s.detail) for s in spans] == [("d0", None), ("t1", None)]
