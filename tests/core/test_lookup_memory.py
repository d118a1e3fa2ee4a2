"""The persistent lookup memory: off writes nothing, bounded, rebuilt when corrupt, fed from saved chats."""

from __future__ import annotations

import json
from pathlib import Path

from specchat.core import paths
from specchat.core.chat.lookup_memory import MEMORY_FILENAME, LookupMemory, saved_texts
from specchat.core.chat.store import ConversationStore


def test_off_by_default_reads_and_writes_nothing(tmp_path: Path) -> None:
    memory = LookupMemory()
    assert memory.path == paths.data_dir() / MEMORY_FILENAME  # next to the chats
    calls = []

    def texts() -> list[str]:
        calls.append(1)
        return ["never"]

    assert memory.load(texts) is False
    memory.add("Dear team, the office is closed on Friday.")
    memory.save()
    assert memory.texts == [] and calls == []
    assert not memory.path.exists() and not list(paths.data_dir().glob("lookup-memory*"))


def test_on_it_is_bounded_newest_kept_and_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / MEMORY_FILENAME
    memory = LookupMemory(path, enabled=True, max_chars=100)
    memory.load(list)
    for i in range(30):
        memory.add(f"reply number {i:02d} " * 2)
    assert memory.size <= 100 and path.stat().st_size < 400
    assert memory.texts[-1].startswith("reply number 29")
    assert all("number 00" not in t for t in memory.texts)
    again = LookupMemory(path, enabled=True, max_chars=100)
    assert again.load(lambda: ["rebuilt"]) is False
    assert again.texts == memory.texts
    single = LookupMemory(tmp_path / "one.json", enabled=True, max_chars=10)
    single.load(list)
    single.add("x" * 50 + "the end")
    assert single.texts == ["xxxthe end"]


def test_a_corrupt_file_is_rebuilt_from_the_saved_conversations(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "chats.sqlite3")
    cid = store.create_conversation("letters")
    store.add_message(cid, "user", "Write a letter.")
    store.add_message(cid, "assistant", "Dear Sir or Madam, I am writing to")
    path = tmp_path / MEMORY_FILENAME
    for junk in (
        b"{not json",
        b"\xff\xfe\x00",
        json.dumps({"version": 1, "texts": [1, 2]}).encode(),
        json.dumps([1, 2]).encode(),
        json.dumps({"version": 99, "texts": []}).encode(),
    ):
        path.write_bytes(junk)
        memory = LookupMemory(path, enabled=True)
        assert memory.load(lambda: saved_texts(store)) is True
        assert memory.texts == ["Write a letter.", "Dear Sir or Madam, I am writing to"]
        assert json.loads(path.read_text(encoding="utf-8"))["texts"] == memory.texts
    memory.disable()
    assert not path.exists() and memory.texts == []
    store.close()
