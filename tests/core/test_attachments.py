"""Attachments kept with their message: stored (schema 7, upgraded from a schema-5 file), in the prompt, in exports,
across a restart, Regenerate, Edit and versions; and a document cut to fit only as the user accepts."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from core.test_chat_logic import Recorder, Submitter, reply

from specchat.core.chat.attachments import Attachment, block, cut_to, estimate_tokens, fit_offer, prompt_text
from specchat.core.chat.controller import ChatLogic, ReplySettings
from specchat.core.chat.documents import PAGE_BREAK
from specchat.core.chat.store import SCHEMA_VERSION, ConversationStore
from specchat.core.engine.depth import DepthControl
from specchat.core.types import DrafterKind, GenerationParams

REPORT = Attachment("report.txt", 2048, "Revenue rose 12% in Q3.\nCosts fell.", 11)
CODE = Attachment("util.py", 40, "def add(a, b):\n    return a + b\n")


class FilesRecorder(Recorder):
    def composer_attachments(self, attachments: list[Attachment]) -> None:
        self.calls.append(("composer_attachments", (attachments,)))


@pytest.fixture
def logic(tmp_path: Path) -> tuple[ChatLogic, ConversationStore, Submitter, FilesRecorder]:
    store = ConversationStore(tmp_path / "chats.sqlite3")
    host, listener = Submitter(), FilesRecorder()
    settings = ReplySettings(GenerationParams(max_tokens=64), DrafterKind.DRAFT_MODEL.value)
    return ChatLogic(store, host, lambda: settings, DepthControl(), listener), store, host, listener


def test_the_prompt_holds_each_attachment_as_a_named_block_before_the_text() -> None:
    text = prompt_text("Summarise it.", [REPORT, CODE])
    assert text == (
        '<document name="report.txt">\nRevenue rose 12% in Q3.\nCosts fell.\n</document>\n\n'
        '<document name="util.py">\ndef add(a, b):\n    return a + b\n</document>\n\nSummarise it.'
    )
    assert prompt_text("plain", []) == "plain"
    assert REPORT.label == "report.txt · 2.0 KB · 11 tokens"
    assert CODE.label == "util.py · 40 bytes · about 8 tokens"


def test_sending_with_attachments_stores_them_and_the_model_reads_them(logic) -> None:
    chat, store, host, _ = logic
    assert chat.send("What rose?", (REPORT,))
    (request,) = host.requests
    assert request.user_text == prompt_text("What rose?", [REPORT])
    assert request.attachments == (REPORT,)
    assert chat.conversation_id is not None
    (user,) = store.messages(chat.conversation_id)
    assert (user.content, user.attachments) == ("What rose?", [REPORT])  # the text as typed; the file beside it
    reply(chat, ("Revenue",), ".")
    chat.send("And costs?")
    later = host.requests[-1]
    assert later.history[0] == {"role": "user", "content": prompt_text("What rose?", [REPORT])}
    assert later.user_text == "And costs?" and later.attachments == (REPORT,)  # the conversation's files


def test_a_message_of_files_alone_is_sent_and_titled_by_them(logic) -> None:
    chat, store, host, _ = logic
    assert not chat.send("   ")
    assert chat.send("", (CODE,))
    assert chat.conversation_id is not None
    assert store.conversation(chat.conversation_id).title == "util.py"
    assert host.requests[0].user_text == block(CODE) + "\n\n"


def test_attachments_survive_a_restart_and_are_exported(tmp_path: Path, logic) -> None:
    chat, store, _, _ = logic
    cut = Attachment("long.md", 90_000, "# Part one", 3, "the first 1 of 9 pages")
    chat.send("Compare", (REPORT, cut))
    reply(chat, ("They",), " differ.")
    cid = chat.conversation_id
    store.close()

    again = ConversationStore(tmp_path / "chats.sqlite3")
    user, answer = again.messages(cid)
    assert user.attachments == [REPORT, cut] and answer.attachments == []
    exported = json.loads(again.export_json(cid))
    assert exported["messages"][0]["attachments"] == [REPORT.as_dict(), cut.as_dict()]
    assert "attachments" not in exported["messages"][1]
    markdown = again.export_markdown(cid)
    assert "*Attached: report.txt (2.0 KB)*" in markdown and "Revenue rose 12% in Q3." in markdown
    assert "*Attached: long.md (87.9 KB, the first 1 of 9 pages)*" in markdown
    assert markdown.index("Revenue rose") < markdown.index("\n\nCompare\n\n**Assistant**")


def test_regenerate_edit_and_versions_keep_each_message_with_its_files(logic) -> None:
    chat, store, host, listener = logic
    chat.send("What rose?", (REPORT,))
    reply(chat, ("Revenue",), ".")
    chat.regenerate()
    assert host.requests[-1].user_text == prompt_text("What rose?", [REPORT])  # the files go with it again
    reply(chat, ("Sales",), ".")
    cid = chat.conversation_id
    assert [m.attachments for m in store.messages(cid)] == [[REPORT], []]

    chat.edit_message(0)  # the message goes back to the composer with its files
    assert listener.args("composer_text")[-1] == ("What rose?", True)
    assert listener.args("composer_attachments")[-1] == ([REPORT],)
    chat.send("What is in the code?", (CODE,))  # edited: another file in its place
    assert host.requests[-1].user_text == prompt_text("What is in the code?", [CODE])
    reply(chat, ("Adding",), ".")
    user, _ = store.messages(cid)
    assert (user.content, user.attachments, user.version, user.versions) == ("What is in the code?", [CODE], 2, 2)
    assert chat.switch_version(0, -1)
    user, answer = store.messages(cid)
    assert (user.content, user.attachments, answer.content) == ("What rose?", [REPORT], "Sales.")
    assert chat.transcript.messages[0].attachments == [REPORT]  # on screen too


def test_an_edit_abandoned_clears_the_composers_files(logic) -> None:
    chat, _, _, listener = logic
    chat.send("What rose?", (REPORT,))
    reply(chat, ("Revenue",), ".")
    chat.edit_message(0)
    chat.stop()
    assert listener.args("composer_attachments")[-1] == ([],)


def test_a_schema_5_file_upgrades_with_its_history_and_takes_attachments(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE schema_version (version INTEGER NOT NULL);
        CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL,
            updated REAL NOT NULL, leaf_id INTEGER, system_prompt TEXT NOT NULL DEFAULT '', sampler TEXT);
        CREATE TABLE messages (id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE, position INTEGER NOT NULL,
            role TEXT NOT NULL, content TEXT NOT NULL, finish_reason TEXT, stats TEXT, created REAL NOT NULL);
        CREATE TABLE spans (id INTEGER PRIMARY KEY,
            message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE, seq INTEGER NOT NULL,
            kind TEXT NOT NULL, text TEXT NOT NULL, round INTEGER NOT NULL, target_prob REAL, draft_prob REAL,
            detail TEXT);
        INSERT INTO schema_version VALUES (5);
        INSERT INTO conversations VALUES (1, 'old chat', 1.0, 2.0, 2, '', NULL);
        INSERT INTO messages VALUES (1, 1, NULL, 0, 'user', 'hi', NULL, NULL, 1.0);
        INSERT INTO messages VALUES (2, 1, 1, 1, 'assistant', 'hello', 'eos', NULL, 1.1);
        INSERT INTO spans VALUES (1, 2, 0, 'target', 'hello', 0, 0.5, NULL, NULL);
        """
    )
    db.close()

    store = ConversationStore(path)
    assert store.notice == ""
    assert [(m.role, m.content, m.attachments) for m in store.messages(1)] == [
        ("user", "hi", []),
        ("assistant", "hello", []),
    ]
    store.add_message(1, "user", "and this?", [CODE])
    store.close()
    check = sqlite3.connect(path)
    assert check.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 7
    assert check.execute("SELECT name, size, tokens, note FROM attachments").fetchall() == [("util.py", 40, None, "")]
    check.close()
    assert ConversationStore(path).messages(1)[-1].attachments == [CODE]


def test_an_attachment_row_that_does_not_read_back_is_shown_with_what_reads(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = store.create_conversation()
    mid = store.add_message(cid, "user", "see", [REPORT])
    db = sqlite3.connect(tmp_path / "c.sqlite3")
    db.execute("UPDATE attachments SET size = 'big', tokens = 'many' WHERE message_id = ?", (mid,))
    db.commit()
    db.close()
    (message,) = store.messages(cid)
    assert message.attachments == [Attachment("report.txt", 0, REPORT.text, None)]


def test_deleting_a_conversation_deletes_its_attachments(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = store.create_conversation()
    store.add_message(cid, "user", "see", [REPORT, CODE])
    store.delete(cid)
    db = sqlite3.connect(tmp_path / "c.sqlite3")
    assert db.execute("SELECT count(*) FROM attachments").fetchone()[0] == 0


def test_a_duplicate_and_a_branch_keep_each_message_s_files(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = store.create_conversation()
    first = store.add_message(cid, "user", "see", [REPORT, CODE])
    store.add_message(cid, "assistant", "Seen.")
    store.add_message(cid, "user", "and this", [CODE])
    copy = store.duplicate(cid)
    assert [m.attachments for m in store.messages(copy)] == [[REPORT, CODE], [], [CODE]]
    branch = store.branch(cid, first)
    assert [m.attachments for m in store.messages(branch)] == [[REPORT, CODE]]
    store.delete(cid)  # the copies own their rows: the original's deletion leaves them
    assert [m.attachments for m in store.messages(copy)][0] == [REPORT, CODE]


# -- a document that does not fit -----------------------------------------------------------


def test_a_paged_document_is_cut_to_whole_pages_with_a_note() -> None:
    pages = [f"Page {n}. " + "word " * 200 for n in range(1, 11)]
    doc = Attachment("report.pdf", 50_000, PAGE_BREAK.join(pages))
    total = estimate_tokens(doc.text)
    cut = cut_to(doc, total // 3)
    assert cut is not None and cut.note == "the first 3 of 10 pages"
    assert cut.text == PAGE_BREAK.join(pages[:3]) and cut.tokens is None
    assert "[report.pdf was cut to fit the context: the first 3 of 10 pages]" in block(cut)
    assert fit_offer(doc, total // 3) == (
        f"report.pdf is about {total:,} tokens; the context has room for about {total // 3:,}: "
        "attach the first 3 of 10 pages?"
    )
    assert cut_to(doc, total) is doc  # it fits: nothing cut


def test_text_is_cut_at_a_line_and_nothing_is_offered_without_room() -> None:
    doc = Attachment("notes.txt", 9000, "\n".join(f"line {i} " + "x" * 80 for i in range(100)), 2000)
    cut = cut_to(doc, 500)
    assert cut is not None and cut.note == f"the first {cut.text.count(chr(10)) + 1} of 100 lines"
    assert doc.text.startswith(cut.text) and len(cut.text) <= len(doc.text) // 4
    one_line = Attachment("blob.txt", 8000, "y" * 8000, 2000)
    cut = cut_to(one_line, 100)
    assert cut is not None and cut.note == "the first 400 of 8,000 characters"
    assert cut_to(doc, 0) is None
    assert fit_offer(doc, 0) == (
        "notes.txt is 2,000 tokens; the context has no room left for it. Remove it or start a new conversation."
    )
