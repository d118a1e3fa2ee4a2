"""The window's lookup memory setting: off by default, built from the saved chats off the GUI thread, off deletes it."""

from __future__ import annotations

import json
import time
from pathlib import Path

from specchat.core import filelock
from specchat.core.chat.lookup_memory import MEMORY_FILENAME
from specchat.core.chat.store import ConversationStore
from specchat.core.settings import Settings, load_settings
from specchat.core.types import DrafterKind, Finished, FinishReason, GenerationStats
from specchat.ui.main_window import MainWindow
from support.events import verified
from support.fake_host import FakeHost

SAVED = [("user", "Write a short letter."), ("assistant", "Dear Sir or Madam, I am writing to")]


def saved_store(tmp_path: Path) -> ConversationStore:
    """A real SQLite file holding one conversation."""
    store = ConversationStore(tmp_path / "chats.sqlite3")
    cid = store.create_conversation("letters")
    for role, content in SAVED:
        store.add_message(cid, role, content)
    return store


def window_on(qtbot, settings: Settings, store: ConversationStore) -> tuple[MainWindow, FakeHost]:
    host = FakeHost()
    window = MainWindow(settings, store, host=host.as_host())
    qtbot.addWidget(window)
    host.loaded()
    return window, host


def reply(qtbot, window: MainWindow, host: FakeHost, text: str) -> None:
    window.send(text)
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit([verified(0, ("Noted",), (), "."), Finished(FinishReason.EOS, GenerationStats())])


def test_turning_it_on_builds_the_memory_from_the_saved_chats_without_blocking_the_window(qtbot, tmp_path) -> None:
    store = saved_store(tmp_path)
    window, host = window_on(qtbot, Settings(), store)
    memory_file = tmp_path / MEMORY_FILENAME  # next to the chats
    assert not window.controls.lookup_memory.isChecked()  # off by default
    assert host.lookup_memory_calls == 0 and not memory_file.exists()
    # Another instance opening the database holds its lock: the build waits for it, the window does not.
    with filelock.held(store.path.with_name(store.path.name + ".lock")):
        started = time.monotonic()
        window.controls.lookup_memory.setChecked(True)
        assert time.monotonic() - started < 0.5
        qtbot.wait(300)  # the GUI thread runs its event loop meanwhile
        assert host.lookup_memory_calls == 0 and not memory_file.exists()
    with qtbot.waitSignal(window.lookup_memory.ready, timeout=15_000) as blocker:
        pass
    texts = [content for _, content in SAVED]
    assert blocker.args == [texts] and host.lookup_memory == texts
    assert json.loads(memory_file.read_text(encoding="utf-8"))["texts"] == texts
    # A finished exchange is remembered too, and the setting is saved.
    reply(qtbot, window, host, "Thanks!")
    window.lookup_memory.wait(10)
    qtbot.waitUntil(lambda: host.lookup_memory == [*texts, "Thanks!", "Noted."], timeout=10_000)
    window.save_settings()
    assert load_settings().lookup_memory is True
    window.close()
    store.close()


def test_on_at_start_it_loads_the_file_and_rebuilds_a_corrupt_one(qtbot, tmp_path) -> None:
    store = saved_store(tmp_path)
    memory_file = tmp_path / MEMORY_FILENAME
    memory_file.write_text(json.dumps({"version": 1, "texts": ["kept from before"]}), encoding="utf-8")
    window, host = window_on(qtbot, Settings(lookup_memory=True), store)
    assert window.controls.lookup_memory.isChecked()
    qtbot.waitUntil(lambda: host.lookup_memory == ["kept from before"], timeout=15_000)
    window.close()
    memory_file.write_bytes(b"{half a file")
    window, host = window_on(qtbot, Settings(lookup_memory=True), store)
    qtbot.waitUntil(lambda: host.lookup_memory == [content for _, content in SAVED], timeout=15_000)
    assert json.loads(memory_file.read_text(encoding="utf-8"))["texts"] == [content for _, content in SAVED]
    window.close()
    store.close()


def test_off_writes_no_file_and_turning_it_off_deletes_the_memory_but_no_conversation(qtbot, tmp_path) -> None:
    store = saved_store(tmp_path)
    window, host = window_on(qtbot, Settings(), store)
    reply(qtbot, window, host, "Remember this?")
    window.lookup_memory.wait(10)
    assert not list(tmp_path.glob("lookup-memory*")) and host.lookup_memory_calls == 0  # off: nothing at all
    window.controls.lookup_memory.setChecked(True)
    qtbot.waitUntil(lambda: host.lookup_memory is not None and "Remember this?" in host.lookup_memory, timeout=15_000)
    assert (tmp_path / MEMORY_FILENAME).exists()
    conversations = [(c.id, [m.content for m in store.messages(c.id)]) for c in store.conversations()]
    with qtbot.waitSignal(window.lookup_memory.ready, timeout=15_000) as blocker:
        window.controls.lookup_memory.setChecked(False)
    assert blocker.args == [None] and host.lookup_memory is None
    assert not list(tmp_path.glob("lookup-memory*"))
    assert [(c.id, [m.content for m in store.messages(c.id)]) for c in store.conversations()] == conversations
    reply(qtbot, window, host, "And now?")
    window.lookup_memory.wait(10)
    assert not list(tmp_path.glob("lookup-memory*"))
    window.close()
    store.close()


def test_automatic_drafting_is_listed_first_and_is_the_default_with_a_draft_model(qtbot, tmp_path) -> None:
    store = ConversationStore(tmp_path / "chats.sqlite3")
    window, host = window_on(qtbot, Settings(), store)
    assert window.controls.drafter.itemText(0) == "Automatic (lookup + draft model)"
    assert window.controls.drafter_kind is DrafterKind.COMPOSITE
    # The narrow panel may cut the closed box's label short: the tooltip and the open list show it whole.
    drafter = window.controls.drafter
    assert drafter.toolTip() == "Automatic (lookup + draft model)"
    assert drafter.view().minimumWidth() >= drafter.view().sizeHintForColumn(0)
    window.send("Hello")
    assert host.requests[-1].drafter is DrafterKind.COMPOSITE
    window.close()
    alone = FakeHost()
    window = MainWindow(Settings(), store, host=alone.as_host())
    qtbot.addWidget(window)
    alone.loaded(draft=False)  # no draft model: lookup alone
    assert window.controls.drafter_kind is DrafterKind.NGRAM
    window.close()
    store.close()
