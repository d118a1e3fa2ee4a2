"""Attaching files in the window, on real widgets offscreen: the paperclip, a drop on the chat or the composer, a
pasted file, chips (preview, remove), the context meter, the question before a document that does not fit, and
the chips of sent messages."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QGuiApplication
from PySide6.QtWidgets import QApplication, QMessageBox

from specchat.core.chat.attachments import Attachment
from specchat.core.chat.documents import PAGE_BREAK
from specchat.ui.attachment_chips import AttachmentPreview
from specchat.ui.main_window import MainWindow


@pytest.fixture
def window(qtbot, settings, store, tmp_path: Path) -> MainWindow:
    last = tmp_path / "last-target.gguf"  # a pair "used last time": the composer takes messages before a load
    last.write_bytes(b"GGUF")
    settings.last_target = str(last)
    settings.n_ctx = 4096
    w = MainWindow(settings, store)
    qtbot.addWidget(w)
    w.show()
    w.stack.setCurrentIndex(1)  # the chat page, as with a conversation open
    assert w.composer.isEnabled() and w.page.attach_button.isEnabled()
    return w


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\nThe meeting moved to Thursday.\n", encoding="utf-8")
    data = tmp_path / "prices.csv"
    data.write_text("item,price\ntea,2.50\n", encoding="utf-8")
    image = tmp_path / "photo.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(200))
    return {"notes": notes, "data": data, "image": image}


def _mime(*paths: Path) -> QMimeData:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    return mime


def _drop(widget, mime: QMimeData) -> bool:
    """Drag ``mime`` onto ``widget`` and drop it, as a file manager would; True when the drop was taken."""
    pos = QPointF(widget.width() / 2, widget.height() / 2)
    actions = Qt.DropAction.CopyAction
    enter = QDragEnterEvent(pos.toPoint(), actions, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, enter)
    if not enter.isAccepted():
        return False
    drop = QDropEvent(pos, actions, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, drop)
    return drop.isAccepted()


def _names(window: MainWindow) -> list[str]:
    return [a.name for a in window.files.attachments]


def test_the_paperclip_attaches_chips_and_a_bad_file_is_one_line(window: MainWindow, files) -> None:
    window.files.pick_files = lambda: [str(files["notes"]), str(files["image"]), str(files["data"])]
    window.page.attach_button.click()
    assert _names(window) == ["notes.md", "prices.csv"]  # the image refused, the others attached
    assert window.banner.isVisible()
    assert window.last_error == "photo.png is a PNG image, not a text document"
    chips = window.page.attachments.chips
    assert window.page.attachments.isVisible() and len(chips) == 2
    assert chips[0].name.text() == "notes.md · 39 bytes · about 10 tokens"
    assert window.files.attachments[0].text == files["notes"].read_text()


def test_files_dropped_on_the_chat_or_the_composer_are_attached(window: MainWindow, files) -> None:
    assert _drop(window.chat_view.viewport(), _mime(files["notes"]))
    assert _drop(window.composer.viewport(), _mime(files["data"]))  # where a drag over the box lands
    assert _names(window) == ["notes.md", "prices.csv"]
    assert window.composer.toPlainText() == ""  # a dropped file is attached, not typed in as its path
    text = QMimeData()
    text.setText("not a file")
    assert not _drop(window.chat_view.viewport(), text)  # plain text dropped on the chat: not taken
    assert _names(window) == ["notes.md", "prices.csv"]


def test_a_pasted_file_is_attached_and_pasted_text_is_typed(window: MainWindow, files) -> None:
    QGuiApplication.clipboard().setMimeData(_mime(files["notes"]))
    window.composer.setFocus()
    window.composer.paste()
    assert _names(window) == ["notes.md"] and window.composer.toPlainText() == ""
    QGuiApplication.clipboard().setText("typed words")
    window.composer.paste()
    assert window.composer.toPlainText() == "typed words" and _names(window) == ["notes.md"]


def test_a_chip_previews_its_text_and_its_cross_removes_it(window: MainWindow, files, qtbot) -> None:
    window.files.attach_paths([str(files["notes"]), str(files["data"])])
    chip = window.page.attachments.chips[0]
    chip.name.click()
    previews = [w for w in QApplication.topLevelWidgets() if isinstance(w, AttachmentPreview) and w.isVisible()]
    assert len(previews) == 1
    assert previews[0].text.toPlainText() == files["notes"].read_text()
    assert previews[0].windowTitle() == "notes.md" and "about 10 tokens" in previews[0].summary.text()
    previews[0].reject()
    window.page.attachments.chips[0].remove.click()
    assert _names(window) == ["prices.csv"]
    window.page.attachments.chips[0].remove.click()
    assert _names(window) == [] and not window.page.attachments.isVisible()


def test_the_meter_counts_typing_and_attachments_against_the_context(window: MainWindow, files) -> None:
    meter = window.page.context_meter
    assert meter.isVisible() and meter.text() == "about 8 / 4,096 tokens"  # an empty message: the template's share
    window.composer.setPlainText("x" * 400)
    assert meter.text() == "about 108 / 4,096 tokens"
    window.files.attach_paths([str(files["notes"])])
    with_file = meter.used
    assert with_file > 108 and meter.text() == f"about {with_file} / 4,096 tokens"
    window.page.attachments.chips[0].remove.click()
    assert meter.used == 108 and not meter.over


def test_a_document_that_does_not_fit_is_offered_cut_or_kept_out(window: MainWindow, tmp_path: Path) -> None:
    pages = [f"Page {n}: " + "lorem ipsum dolor " * 200 for n in range(1, 41)]  # ~36,000 tokens on 40 pages
    big = tmp_path / "report.txt"
    big.write_text(PAGE_BREAK.join(pages), encoding="utf-8")
    loads: list[bool] = []
    window.loader.load_last_pair = lambda: loads.append(True)  # type: ignore[method-assign]
    window.files.attach_paths([str(big)])
    assert window.page.context_meter.over
    window.composer.setPlainText("Summarise the report")

    window.composer.send()  # Enter
    box = window.files.fit_box
    assert box is not None and box.isVisible()
    assert box.text().startswith("report.txt is about ")
    assert "; the context has room for about " in box.text() and box.text().endswith("pages?")
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert window.files.fit_box is None and loads == []  # cancelled: nothing sent, nothing cut
    assert window.files.attachments[0].note == "" and window.composer.toPlainText() == "Summarise the report"

    window.composer.send()
    box = window.files.fit_box
    assert box is not None
    offered = box.text().split("attach ")[-1].rstrip("?")
    accept = next(b for b in box.buttons() if b.text() == "Attach the cut")
    accept.click()
    (cut,) = window.files.attachments
    assert cut.note == offered and cut.note.startswith("the first ") and cut.note.endswith(" of 40 pages")
    assert big.read_text().startswith(cut.text) and len(cut.text) < len(big.read_text())
    assert window.page.attachments.chips[0].name.text().endswith(" · cut")
    assert not window.page.context_meter.over
    assert loads == [True]  # sent on: the pair used last time loads first, then the message goes
    assert window.composer.toPlainText() == ""


def test_a_file_gone_after_attaching_is_sent_as_it_was_read(window: MainWindow, files) -> None:
    window.files.attach_paths([str(files["notes"])])
    files["notes"].unlink()
    assert window.files.attachments[0].text == "# Notes\nThe meeting moved to Thursday.\n"
    window.files.attach_paths([str(files["notes"])])  # attached again after it went: one line, the chip stays
    assert window.last_error == "notes.md is no longer there (moved or deleted?)"
    assert _names(window) == ["notes.md"]


def test_sent_messages_show_their_chips_and_edit_brings_them_back(window: MainWindow, store, qtbot) -> None:
    report = Attachment("report.pdf", 120_000, "Quarterly revenue rose 12%.", 9)
    cid = store.create_conversation("Revenue")
    store.add_message(cid, "user", "What rose?", [report])
    store.add_message(cid, "assistant", "Revenue rose 12%.")
    window.chat.open_conversation(cid)
    text = window.chat_view.toPlainText()
    assert "\n report.pdf · 117 KB · 9 tokens \n" in text  # a chip on its own line
    assert text.index("report.pdf") < text.index("What rose?")
    window.chat_view._actions.on_anchor(QUrl("specchat:attachment/0/0"))
    preview = window.chat_view._actions.preview
    assert preview is not None and preview.isVisible() and preview.text.toPlainText() == report.text
    preview.reject()
    assert window.chat_view.anchorAt(QPoint(0, 0)) is not None  # the view still answers after the preview

    window.edit_message(0)
    assert window.composer.toPlainText() == "What rose?" and window.files.attachments == (report,)
    window.stop()  # Esc: the edit abandoned, its files with it
    assert not window.files.attachments  # (mypy keeps the tuple narrowed to (report,) across stop())


def test_the_meter_shows_the_targets_count_and_only_the_latest(qtbot, settings, store, tmp_path: Path) -> None:
    from specchat.ui.worker import TokenCount
    from support.fake_host import window_with

    window, host = window_with(qtbot, settings, store)
    meter = window.page.context_meter
    doc = tmp_path / "a.txt"
    doc.write_text("alpha beta gamma\n")
    window.files.attach_paths([str(doc)])
    window.composer.setPlainText("Hi")
    qtbot.waitUntil(lambda: bool(host.counts), timeout=5000)  # debounced: one count after typing pauses
    first = host.counts[-1]
    assert first.messages[-1]["content"] == '<document name="a.txt">\nalpha beta gamma\n</document>\n\nHi'
    assert first.texts == ("alpha beta gamma\n",)
    window.composer.setPlainText("Hi there")
    qtbot.waitUntil(lambda: host.counts[-1].serial > first.serial, timeout=5000)
    latest = host.counts[-1]
    host.worker.tokens_counted.emit(TokenCount(first.serial, 999, 4096, (5,)))  # stale: typing went on since
    assert meter.text().startswith("about ")
    host.worker.tokens_counted.emit(TokenCount(latest.serial, 31, 4096, (5,) if latest.texts else ()))
    assert meter.text() == "31 / 4,096 tokens" and not meter.estimated
    assert window.files.attachments[0].tokens == 5
    assert window.page.attachments.chips[0].name.text() == "a.txt · 17 bytes · 5 tokens"
    window.send("Hi there")
    (request,) = host.requests
    assert list(request.attachments) == window.chat.transcript.attachments() and request.attachments[0].tokens == 5
    assert window.files.attachments == () and window.composer.toPlainText() == ""
    assert window.chat.transcript.messages[0].attachments[0].name == "a.txt"


def test_fates_xray_and_stats_say_which_text_lookup_drafted_from(qtbot) -> None:
    import dataclasses

    from specchat.core.chat.transcript import ReplyFigures, spans_of
    from specchat.core.engine.lookup import INSERTED, REPLACED
    from specchat.core.types import DraftSource
    from specchat.ui.stats_panel import StatsPanel
    from specchat.ui.token_styles import drafted_by, span_tooltip
    from specchat.ui.token_xray import TokenXray
    from support.xray import xray_round

    round_ = dataclasses.replace(
        xray_round(2, 1), sources=(DraftSource.LOOKUP,) * 3, origins=("report.pdf", "report.pdf", "")
    )
    spans = spans_of(round_)
    assert spans[0].detail is not None and spans[2].detail is not None
    assert drafted_by(spans[0].detail) == "drafted by lookup in report.pdf (match of 4 tokens)"
    assert drafted_by(spans[2].detail) == "drafted by lookup in the conversation (its copy resumed after an edit)"
    guessed = dataclasses.replace(spans[2].detail, match_length=INSERTED)
    assert drafted_by(guessed) == (
        "drafted by lookup in the conversation (a guess: its copy goes on past inserted words)"
    )
    guessed = dataclasses.replace(spans[0].detail, match_length=REPLACED)
    assert drafted_by(guessed) == (
        "drafted by lookup in report.pdf (a guess: its copy goes on past the words an edit replaced)"
    )
    assert "drafted by lookup in report.pdf" in span_tooltip(spans[0])
    xray = TokenXray()
    qtbot.addWidget(xray)
    assert xray.show_span(spans[0], QPoint(100, 100))
    assert xray.source.text() == "drafted by lookup in report.pdf (match of 4 tokens)"

    panel = StatsPanel()
    qtbot.addWidget(panel)
    figures = ReplyFigures()
    figures.fold([round_])
    panel.show_stored(figures)
    assert not panel.by_origin.isHidden()
    assert panel.by_origin.text() == "report.pdf 100% of 2 · the conversation 0% of 1"
    panel.show_stored(ReplyFigures())
    assert panel.by_origin.isHidden() and panel.by_origin.text() == "\u2013"  # no text of its own: no row
