"""A message with an attached document on the real demo pair: the meter counts with the target's tokenizer, the
reply quotes the document, and the attachment is kept with the message after a restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from ui.test_real_models import REPLY_TIMEOUT, open_window

from specchat.core.chat.attachments import prompt_text
from specchat.core.chat.store import ConversationStore
from specchat.core.types import DrafterKind, DraftSource, FinishReason
from specchat.ui.main_window import MainWindow

pytestmark = pytest.mark.slow

FACT = "The lighthouse keeper's cat is named Biscuit."


def test_a_reply_quotes_an_attached_document(qtbot, settings, store, demo_pair, tmp_path: Path) -> None:
    doc = tmp_path / "story.txt"
    doc.write_text(f"{FACT}\nBiscuit sleeps on the lamp room stairs.\n", encoding="utf-8")
    settings.temperature = 0.0
    # Lookup alone: which source the composite picks depends on this machine's timings; lookup's own choice of
    # text (the longest match, an attached text before the conversation's copy of it) does not.
    settings.drafter = DrafterKind.NGRAM.value
    window = open_window(qtbot, settings, store, demo_pair, max_tokens=32, depth=4)
    window.files.pick_files = lambda: [str(doc)]
    window.page.attach_button.click()
    question = "Quote the first sentence of the document exactly."
    window.composer.setPlainText(question)

    meter = window.page.context_meter
    # Counted on the runtime's thread, after the calibration that follows a load (slow on a busy machine).
    counted = lambda: not meter.estimated and window.files.attachments[0].tokens is not None  # noqa: E731
    qtbot.waitUntil(counted, timeout=REPLY_TIMEOUT)
    runtime = window.host.worker.runtime
    assert runtime is not None
    expected = len(
        runtime.prompt([{"role": "user", "content": prompt_text(question, window.files.attachments)}]).tokens
    )
    assert meter.text() == f"{expected:,} / {runtime.n_ctx:,} tokens"  # the target's own count, not an estimate
    (attachment,) = window.files.attachments
    assert attachment.tokens == len(runtime.target.tokenize(attachment.text, add_special=False, parse_special=False))

    doc.unlink()  # gone before Send: the message goes with the text read when it was attached
    with qtbot.waitSignal(window.reply_finished, timeout=REPLY_TIMEOUT) as blocker:
        window.composer.send()
    assert blocker.args[0].reason is not FinishReason.ERROR
    reply = window.transcript.messages[-1].content
    assert "Biscuit" in reply, reply
    figures = window.transcript.messages[-1].figures
    assert figures is not None
    assert figures.by_origin.get("story.txt", [0, 0])[1] > 0, figures.by_origin
    quoted = [s for s in window.transcript.messages[-1].spans or [] if s.detail and s.detail.origin == "story.txt"]
    assert quoted and all(s.detail and s.detail.source is DraftSource.LOOKUP for s in quoted)  # "lookup in story.txt"
    cid = window.conversation_id
    assert cid is not None
    window.close()

    again = MainWindow(settings, ConversationStore(store.path))
    qtbot.addWidget(again)
    again.chat.open_conversation(cid)
    user = again.transcript.messages[0]
    assert (user.content, [a.name for a in user.attachments]) == (question, ["story.txt"])
    assert user.attachments[0].text.startswith(FACT)
    assert "story.txt" in again.chat_view.toPlainText()
