"""What the app reads back is checked where it is read: a bad value is skipped, repaired or set aside with
one line naming the file, the rest loads, caches that do not read back are rebuilt (issue 30, defects 1-7).

Real SQLite files poked with SQL and real JSON files; the window side is in tests/ui/test_read_back_window.py.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest

from specchat.core.advise import cache as advice_cache
from specchat.core.chat.lookup_memory import LookupMemory
from specchat.core.chat.race_record import RaceRecord
from specchat.core.chat.store import ConversationStore
from specchat.core.chat.transcript import ReplyFigures, TokenDetail, TokenSpan
from specchat.core.models.library import ModelRoot, scan
from specchat.core.settings import Settings, load_servers, load_settings, saved_free, servers_path, settings_path
from specchat.core.types import DraftSource, TokenKind
from support.gguf_files import GgufMaker
from support.stored import poke, stored_reply

DEEP = "[" * 100_000 + "]" * 100_000
DETAIL = TokenDetail(1, DraftSource.MODEL, 0, True, (("a", 0.5), ("b", 0.25)), (("a", 0.75),))


def _conversation(path: Path, spans: int = 3) -> int:
    """A stored conversation: a question and a reply of ``spans`` accepted tokens with X-ray details."""
    shown = [TokenSpan(TokenKind.ACCEPTED, f"w{i} ", 1, 0.5, 0.5, DETAIL) for i in range(spans)]
    return stored_reply(path, shown, {"passes": 1, "tokens_per_second": 12.0})


def _reply(path: Path, cid: int) -> tuple[list[str], list[TokenSpan], dict[str, object] | None]:
    store = ConversationStore(path)
    try:
        messages = store.messages(cid)
    finally:
        store.close()
    return [m.content for m in messages], messages[-1].spans, messages[-1].stats


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("UPDATE messages SET stats = 'garbage{' WHERE role = 'assistant'", "the figures column is not JSON"),
        ("UPDATE messages SET stats = '[1,2,3]' WHERE role = 'assistant'", "the figures column is not an object"),
        ("UPDATE messages SET stats = '" + DEEP + "' WHERE role = 'assistant'", "nested too deeply"),
        (
            """UPDATE messages SET stats = '{"passes":"abc","tokens_per_second":12}' WHERE role = 'assistant'""",
            "figures passes of the wrong type",
        ),
        (
            """UPDATE messages SET stats = '{"passes":1e400,"timeline":[[1e400,1,1]]}' WHERE role = 'assistant'""",
            "figures passes, timeline of the wrong type",
        ),
    ],
    ids=["not-json", "a-list", "deep", "text-count", "infinite"],
)
def test_bad_figures_are_left_out_with_a_line_and_the_reply_loads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, sql: str, said: str
) -> None:
    path = tmp_path / "chats.sqlite3"
    cid = _conversation(path)
    poke(path, sql)
    with caplog.at_level(logging.WARNING):
        contents, spans, stats = _reply(path, cid)
    assert contents == ["Say something.", "w0 w1 w2 "] and len(spans) == 3
    assert str(path) in caplog.text and said in caplog.text and len(caplog.records) == 1
    figures = ReplyFigures.from_dict(stats)  # what the window builds from it: never raises
    assert figures.passes == 0 and figures.timeline == []


def test_bad_spans_are_repaired_or_set_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "chats.sqlite3"
    cid = _conversation(path)
    poke(path, "UPDATE spans SET target_prob = 'abc', round = 'x' WHERE seq = 0")
    poke(path, "UPDATE spans SET detail = '{\"a\": 1}' WHERE seq = 1")  # a detail of the wrong shape
    poke(path, "UPDATE spans SET detail = ? WHERE seq = 2", DEEP)
    with caplog.at_level(logging.WARNING):
        _, spans, _ = _reply(path, cid)
    assert [(s.text, s.round, s.target_prob, s.draft_prob) for s in spans] == [
        ("w0 ", -1, None, 0.5),
        ("w1 ", 1, 0.5, 0.5),
        ("w2 ", 1, 0.5, 0.5),
    ]
    assert [s.detail for s in spans] == [DETAIL, None, None]
    assert "unreadable target_prob" in caplog.text and "2 tokens with an unreadable detail" in caplog.text

    poke(path, "UPDATE spans SET kind = 'bogus' WHERE seq = 1")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        contents, spans, _ = _reply(path, cid)
    assert spans == [] and contents[-1] == "w0 w1 w2 "  # the text stays, without its colours
    assert "unknown kind 'bogus'" in caplog.text and str(path) in caplog.text


def test_a_parent_loop_ends_the_walk_and_is_broken(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "chats.sqlite3"
    cid = _conversation(path)
    poke(path, "UPDATE messages SET parent_id = (SELECT max(id) FROM messages) WHERE parent_id IS NULL")
    with caplog.at_level(logging.WARNING):
        contents, _, _ = _reply(path, cid)
    assert contents == ["Say something.", "w0 w1 w2 "] and "form a loop" in caplog.text
    store = ConversationStore(path)
    first = store.messages(cid)[0]
    assert store.switch_version(cid, first.id, 0)  # following children down ends too
    assert [m.content for m in store.messages(cid)] == contents
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM messages WHERE parent_id IS NULL").fetchone()[0] == 1  # repaired
    db.close()


def test_race_records_and_timelines_hold_no_impossible_times() -> None:
    run = {"text": "x", "timeline": [[0.5, 1, 1]], "first_token_seconds": 0.1, "finish_reason": "eos"}
    good = {"v": 2, "spec": run, "plain": run, "blocks": [["speculative", 1, 0.5], ["plain", 1, 0.5]]}
    assert RaceRecord.from_dict(good) is not None
    for bad_run in (
        {"timeline": [[1e308 * 10, 1, 1]]},
        {"timeline": [[float("nan"), 1, 1]]},
        {"timeline": [[1.0, 1e400, 1]]},
        {"first_token_seconds": -1},
    ):
        for side in ("spec", "plain"):
            assert RaceRecord.from_dict({**good, side: {**run, **bad_run}}) is None, (side, bad_run)
    for bad in ({"recorded_at": 1e308}, {"blocks": [["plain", 1, float("inf")]]}, {"expected_rate": -1.0}):
        assert RaceRecord.from_dict({**good, **bad}) is None, bad
    figures = ReplyFigures.from_dict({"timeline": [[1.0, 1, 1], [float("inf"), 1, 1]], "sampler": {"top_k": 1e400}})
    assert figures.timeline == [(1.0, 1, 1)] and figures.sampler == {}


SURROGATE_SETTINGS = '{"window_geometry": "\\ud800", "theme": "dark"}'
SURROGATE_SERVERS = '{"remote": {"servers": ["\\ud800:1", "127.0.0.1:50052"], "free_bytes": {"\\udfff": 5}}}'


@pytest.mark.parametrize("content", [DEEP, SURROGATE_SETTINGS], ids=["deep", "surrogate"])
def test_settings_that_do_not_read_back_name_the_file(caplog: pytest.LogCaptureFixture, content: str) -> None:
    settings_path().write_text(content, encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        settings = load_settings()
    assert str(settings_path()) in caplog.text and len(caplog.records) == 1
    if content == DEEP:
        assert settings == Settings() and "nested too deeply" in caplog.text
    else:  # the lone surrogate is replaced, so the text can be written and shown
        assert settings.theme == "dark" and settings.window_geometry == "\ufffd" and "surrogate" in caplog.text


@pytest.mark.parametrize("content", [DEEP, SURROGATE_SERVERS], ids=["deep", "surrogate"])
def test_the_server_list_reads_back_or_names_the_file(caplog: pytest.LogCaptureFixture, content: str) -> None:
    servers_path().write_text(content, encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        servers = load_servers()
    assert str(servers_path()) in caplog.text
    assert servers == (() if content == DEEP else ("127.0.0.1:50052",))
    assert saved_free() == ({} if content == DEEP else {"\ufffd": 5})


def test_a_million_short_texts_load_in_one_cut(tmp_path: Path) -> None:
    """Dropping the oldest texts was a pop(0) per text (quadratic: minutes for this file); now one slice."""
    path = tmp_path / "lookup-memory.json"
    path.write_text(json.dumps({"version": 1, "texts": [f"t{i}" for i in range(1_000_000)]}), encoding="utf-8")
    memory = LookupMemory(path, enabled=True, max_chars=1000)
    assert memory.load(list) is False
    assert memory.size <= 1000 and memory.texts[-1] == "t999999"


def _cache_file(entries: dict[str, object]) -> Path:
    path = advice_cache.cache_path()
    path.write_text(json.dumps({"version": 1, "results": entries}), encoding="utf-8")
    return path


def test_the_advisor_cache_is_rebuilt_and_checked_per_entry(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(advice_cache, "machine_identity", lambda: "this machine")
    target = tmp_path / "t.gguf"
    target.write_bytes(b"target")
    result = advice_cache.CachedResult(str(target), "ngram", "", 4, 1.5, 1.4, 1.6, 0.5, 1.0)
    advice_cache.cache_path().write_text(DEEP, encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        advice_cache.store([result])  # the finished measurements are kept: the nested file is replaced
    assert "nested too deeply" in caplog.text and str(advice_cache.cache_path()) in caplog.text
    assert advice_cache.lookup(target, "ngram") == result
    key = advice_cache.result_key(target, "ngram", None)
    for bad in ({"measured_speedup": "fast"}, {"predicted_speedup": float("nan")}, {"best_depth": True}):
        _cache_file({str(key): {**vars(result), **bad}})
        assert advice_cache.lookup(target, "ngram") is None, bad
    _cache_file({str(key): ["not", "an", "entry"]})
    assert advice_cache.lookup(target, "ngram") is None


@pytest.mark.parametrize(
    "index",
    [
        DEEP,
        "[1, 2]",
        '{"version": 1, "files": {"%s": {"size": "big", "mtime_ns": []}}}',
        '{"version": 1, "files": {"%s": {"size": %d, "mtime_ns": %d, "info": {"path": 5}}}}',
        '{"version": 1, "files": {"%s": {"size": %d, "mtime_ns": %d, "info": "broken"}}}',
    ],
    ids=["deep", "a-list", "wrong-types", "broken-info", "info-not-object"],
)
def test_a_corrupt_model_index_is_rebuilt(
    make_gguf: GgufMaker, tmp_path: Path, caplog: pytest.LogCaptureFixture, index: str
) -> None:
    model = make_gguf("model.gguf")
    st = model.stat()
    path = tmp_path / "gguf-index.json"
    path.write_text(
        index.replace("%s", str(model)).replace("%d", str(st.st_size), 1).replace("%d", str(st.st_mtime_ns), 1),
        encoding="utf-8",
    )
    with caplog.at_level(logging.WARNING):
        found = scan([ModelRoot(model.parent, "user")], index=path)
    assert [e.path for e in found.entries] == [model] and found.read == 1 and str(path) in caplog.text
    again = scan([ModelRoot(model.parent, "user")], index=path)  # rebuilt: answered from the index now
    assert again.cached == 1 and again.read == 0
