"""The conversation store never loses history: unique aside copies, newer schemas left alone, a
creation lock that holds between two real processes opening the same file at the same moment."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from specchat.core import filelock
from specchat.core.chat import store_opening
from specchat.core.chat.store import DB_FILENAME, SCHEMA_VERSION, ConversationStore, NewerSchemaError, StoreError
from specchat.core.types import SpecchatError

GARBAGE = b"this is not a sqlite database, it only has the name of one " * 64


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _asides(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if ".unreadable-" in p.name and not p.name.endswith(("-wal", "-shm")))


def _with_history(path: Path, titles: tuple[str, ...] = ("first", "second")) -> None:
    store = ConversationStore(path)
    for title in titles:
        cid = store.create_conversation(title)
        store.add_message(cid, "user", f"what I asked in {title}")
    store.close()


def _titles(path: Path) -> set[str]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {row[0] for row in db.execute("SELECT title FROM conversations")}
    finally:
        db.close()


def _set_version(path: Path, version: object) -> None:
    db = sqlite3.connect(path)
    db.execute("UPDATE schema_version SET version = ?", (version,))
    db.commit()
    db.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An empty folder for the database (tmp_path also holds the isolated app dirs)."""
    path = tmp_path / "store"
    path.mkdir()
    return path


def test_aside_copies_from_the_same_second_never_overwrite_each_other(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(f"{store_opening.__name__}.time.strftime", lambda fmt: "20250101-120000")
    db_path = folder / DB_FILENAME
    earlier = folder / f"{DB_FILENAME}.unreadable-20250101-120000"
    earlier.write_bytes(b"an aside copy from an earlier run")
    contents = [GARBAGE, GARBAGE[::-1], b"\x00" * 4096]
    for data in contents:
        db_path.write_bytes(data)
        store = ConversationStore(db_path)
        assert "could not be read" in store.notice and "\n" not in store.notice
        store.close()
    kept = _asides(folder)
    assert len(kept) == 4
    assert earlier.read_bytes() == b"an aside copy from an earlier run"
    assert sorted(p.read_bytes() for p in kept) == sorted([earlier.read_bytes(), *contents])


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 99, "two"])
def test_a_newer_schema_is_left_untouched_and_its_history_survives(folder: Path, version: object) -> None:
    db_path = folder / DB_FILENAME
    _with_history(db_path)
    _set_version(db_path, version)  # what a newer specchat would have written
    before = {p.name: _digest(p) for p in folder.iterdir() if not p.name.endswith(".lock")}

    store = ConversationStore(db_path)
    assert "newer specchat" in store.notice and "left untouched" in store.notice
    assert "\n" not in store.notice
    cid = store.create_conversation("this session only")  # works, in memory
    assert store.conversation(cid).title == "this session only"
    store.close()

    after = {p.name: _digest(p) for p in folder.iterdir() if not p.name.endswith(".lock")}
    assert after == before  # not moved aside, not replaced, not even rewritten
    assert _titles(db_path) == {"first", "second"}  # "upgrading again" finds it all


def test_after_going_back_to_a_known_schema_the_history_opens_again(folder: Path) -> None:
    db_path = folder / DB_FILENAME
    _with_history(db_path)
    _set_version(db_path, 7)
    ConversationStore(db_path).close()
    ConversationStore(db_path).close()  # opened twice by the older app: still nothing replaced
    _set_version(db_path, 1)
    store = ConversationStore(db_path)
    assert store.notice == ""
    assert {c.title for c in store.conversations()} == {"first", "second"}
    store.close()


def test_store_errors_are_one_line_specchat_errors(tmp_path: Path) -> None:
    assert issubclass(StoreError, SpecchatError) and issubclass(NewerSchemaError, StoreError)
    store = ConversationStore(tmp_path / "c.sqlite3")
    with pytest.raises(StoreError) as info:
        store.conversation(12345)
    assert str(info.value) == "no conversation with id 12345"
    store.close()


def test_a_lock_held_elsewhere_leaves_the_file_alone(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db_path = folder / DB_FILENAME
    db_path.write_bytes(GARBAGE)  # would be set aside if we got the lock
    monkeypatch.setattr(store_opening, "LOCK_WAIT_S", 0.2)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from specchat.core import filelock\n"
            "with filelock.held(Path(sys.argv[1])):\n"
            "    print('held', flush=True); sys.stdin.readline()",
            str(db_path.with_name(DB_FILENAME + ".lock")),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        store = ConversationStore(db_path)
        assert "could not be opened" in store.notice and "held by another process" in store.notice
        store.close()
    finally:
        holder.communicate("done\n", timeout=30)
    assert db_path.read_bytes() == GARBAGE and not _asides(folder)


def test_a_folder_where_the_lock_file_belongs_leaves_the_store_in_memory(folder: Path) -> None:
    db_path = folder / DB_FILENAME
    _with_history(db_path)
    (folder / "conversations.sqlite3.lock").unlink()
    (folder / "conversations.sqlite3.lock").mkdir()
    store = ConversationStore(db_path)
    assert "could not be opened" in store.notice and "\n" not in store.notice
    store.close()
    assert _titles(db_path) == {"first", "second"}


def test_the_lock_excludes_a_second_holder(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    with filelock.held(lock):
        with pytest.raises(filelock.LockTimeoutError), filelock.held(lock, wait_s=0.05):
            pass
    with filelock.held(lock, wait_s=0.05):  # released: free again
        pass
    assert lock.exists()


# -- two real processes opening the same file at the same moment ------------------------------

_OPENER = """
import json, sys
from pathlib import Path
from specchat.core.chat.store import ConversationStore
print("ready", flush=True)
for line in sys.stdin:
    path, title = json.loads(line)
    store = ConversationStore(Path(path))
    store.create_conversation(title)
    print(json.dumps(store.notice), flush=True)
    store.close()
"""


@pytest.fixture
def openers() -> Iterator[list[subprocess.Popen[str]]]:
    procs = [
        subprocess.Popen([sys.executable, "-c", _OPENER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield procs
    for proc in procs:
        proc.communicate(timeout=30)


def _open_together(procs: list[subprocess.Popen[str]], db_path: Path) -> list[str]:
    """Both processes open ``db_path`` at once, each adds a conversation; returns their notices."""
    for i, proc in enumerate(procs):
        assert proc.stdin is not None
        proc.stdin.write(json.dumps([str(db_path), f"instance {i}"]) + "\n")
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.flush()
    return [json.loads(proc.stdout.readline()) for proc in procs]  # type: ignore[union-attr]


ROUNDS = 20


def test_two_instances_on_a_newer_schema_never_lose_it(tmp_path: Path, openers) -> None:
    for n in range(ROUNDS):
        folder = tmp_path / f"round{n}"
        folder.mkdir()
        db_path = folder / DB_FILENAME
        _with_history(db_path)
        _set_version(db_path, SCHEMA_VERSION + 1)
        digest = _digest(db_path)
        notices = _open_together(openers, db_path)
        assert all("newer specchat" in notice for notice in notices), notices
        assert _digest(db_path) == digest and not _asides(folder)
        assert _titles(db_path) == {"first", "second"}


def test_two_instances_on_a_damaged_file_keep_exactly_one_aside_copy(tmp_path: Path, openers) -> None:
    for n in range(ROUNDS):
        folder = tmp_path / f"round{n}"
        folder.mkdir()
        db_path = folder / DB_FILENAME
        db_path.write_bytes(GARBAGE)
        notices = _open_together(openers, db_path)
        assert sum("could not be read" in notice for notice in notices) == 1, notices
        assert [p.read_bytes() for p in _asides(folder)] == [GARBAGE]
        assert _titles(db_path) == {"instance 0", "instance 1"}  # both wrote into the one fresh database


def test_two_instances_on_a_healthy_file_both_keep_writing_to_it(tmp_path: Path, openers) -> None:
    for n in range(ROUNDS // 4):
        folder = tmp_path / f"round{n}"
        folder.mkdir()
        db_path = folder / DB_FILENAME
        _with_history(db_path)
        assert _open_together(openers, db_path) == ["", ""]
        assert _titles(db_path) == {"first", "second", "instance 0", "instance 1"}
        assert not _asides(folder)


def test_two_instances_creating_the_file_write_one_schema_row(tmp_path: Path, openers) -> None:
    for n in range(ROUNDS // 4):
        db_path = tmp_path / f"round{n}" / DB_FILENAME
        db_path.parent.mkdir()
        assert _open_together(openers, db_path) == ["", ""]
        db = sqlite3.connect(db_path)
        assert db.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        db.close()
        assert not _asides(db_path.parent)
