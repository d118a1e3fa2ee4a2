"""Schema 5: a conversation keeps its sampler preset; old files upgrade, bad rows read back as none."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from specchat.core.chat.presets import BUILT_IN, CUSTOM, SamplerPreset, preset_of, user_presets
from specchat.core.chat.store import SCHEMA_VERSION, ConversationStore
from support.stored import poke

BALANCED = next(p for p in BUILT_IN if p.name == "Balanced")


def _schema_4_file(path: Path) -> int:
    """A file as specchat wrote it at schema 4 (no ``sampler`` column), with one conversation; its id."""
    store = ConversationStore(path)
    cid = store.create_conversation("before presets")
    store.add_message(cid, "user", "hello")
    store.close()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE conversations DROP COLUMN sampler")
    db.execute("UPDATE schema_version SET version = 4")
    db.commit()
    db.close()
    return cid


def test_a_schema_4_file_upgrades_and_keeps_a_sampler_per_conversation(tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    cid = _schema_4_file(path)
    store = ConversationStore(path)
    assert store.notice == "" and store.sampler(cid) is None  # kept before presets: none
    assert [m.content for m in store.messages(cid)] == ["hello"]
    other = store.create_conversation("another")
    store.set_sampler(cid, BALANCED)
    store.set_sampler(other, SamplerPreset(CUSTOM, 0.3, 7, 0.5, 1.2))
    store.close()
    assert sqlite3.connect(path).execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 7
    again = ConversationStore(path)
    assert again.sampler(cid) == BALANCED
    assert again.sampler(other) == SamplerPreset(CUSTOM, 0.3, 7, 0.5, 1.2)
    assert again.sampler(12345) is None  # no such conversation
    again.close()


@pytest.mark.parametrize(
    "row",
    [
        "not json",
        "[]",
        "null",
        "3",
        '{"name": "x"}',
        json.dumps({**BALANCED.as_dict(), "temperature": "hot"}),
        json.dumps({**BALANCED.as_dict(), "temperature": 99}),
        json.dumps({**BALANCED.as_dict(), "top_k": 2.5}),
        json.dumps({**BALANCED.as_dict(), "top_p": 0}),
        json.dumps({**BALANCED.as_dict(), "repeat_penalty": True}),
        json.dumps({**BALANCED.as_dict(), "name": ""}),
        json.dumps({**BALANCED.as_dict(), "name": 7}),
        '{"name": "\\ud800", "temperature": 0, "top_k": 1, "top_p": 1, "repeat_penalty": 1e999}',
        b"\x00\xff",
        42,
    ],
    ids=lambda r: repr(r)[:24],
)
def test_a_bad_sampler_row_reads_back_as_none(tmp_path: Path, row: object, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "c.sqlite3"
    store = ConversationStore(path)
    cid = store.create_conversation("poisoned")
    store.close()
    poke(path, "UPDATE conversations SET sampler = ? WHERE id = ?", row, cid)
    again = ConversationStore(path)
    assert again.sampler(cid) is None
    assert "not restored" in caplog.text
    assert [c.title for c in again.conversations()] == ["poisoned"]  # the rest reads as before
    again.close()


def test_preset_values_are_checked_and_user_presets_never_shadow_built_in_ones() -> None:
    assert preset_of(BALANCED.as_dict()) == BALANCED
    assert preset_of({**BALANCED.as_dict(), "top_k": 40.0}) == BALANCED  # a whole number written as a float
    assert preset_of({**BALANCED.as_dict(), "name": "  Mine  "}) == BALANCED.named("Mine")
    assert preset_of({**BALANCED.as_dict(), "name": "x" * 81}) is None
    saved = {
        "Mine": {"temperature": 0.2, "top_k": 5, "top_p": 0.8, "repeat_penalty": 1.0},
        "Precise": {"temperature": 1.5, "top_k": 5, "top_p": 0.8, "repeat_penalty": 1.0},
        CUSTOM: {"temperature": 0.2, "top_k": 5, "top_p": 0.8, "repeat_penalty": 1.0},
        "Broken": {"temperature": -1},
        "Odd": "text",
    }
    assert user_presets(saved) == [SamplerPreset("Mine", 0.2, 5, 0.8, 1.0)]
    assert user_presets([1, 2]) == []
    assert BALANCED.same_values(BALANCED.named("Other")) and not BALANCED.same_values(BUILT_IN[0])
