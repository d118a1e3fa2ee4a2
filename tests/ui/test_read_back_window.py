"""The window on poisoned files: it opens, draws and answers clicks (issue 30, defects 1, 3, 4 and 8).

Real SQLite and JSON files, real widgets offscreen, and the real app started as a process on a data
and config folder full of bad values.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from PySide6.QtCore import QPoint, Qt

from specchat.core.chat.race_record import RaceRecord, RaceRun
from specchat.core.chat.store import ConversationStore
from specchat.core.chat.transcript import Message, ReplyFigures, TokenDetail, TokenSpan
from specchat.core.settings import Settings
from specchat.core.types import DraftSource, TokenKind
from specchat.ui.main_window import MainWindow
from specchat.ui.markdown_render import MAX_UNBROKEN_SPANS
from specchat.ui.race import MAX_TIMER_MS, RacePanel
from specchat.ui.token_styles import PROP_MESSAGE
from specchat.ui.token_xray import MAX_SHOWN_CHARS
from support.fake_host import FakeHost
from support.stored import poke, stored_reply
from support.views import char_point

DETAIL = TokenDetail(1, DraftSource.MODEL, 0, True, (("a", 0.5),), (("a", 0.75),))


def _window(qtbot, path: Path, cid: int) -> MainWindow:
    window = MainWindow(Settings(last_conversation=cid), ConversationStore(path), host=FakeHost().as_host())
    qtbot.addWidget(window)
    window.resize(1000, 700)
    window.show()
    qtbot.waitExposed(window)
    return window


def _token_point(window: MainWindow, text: str) -> QPoint:
    """The viewport point over the middle of the first character of the reply's token ``text``."""
    document = window.chat_view.document()
    found = document.find(text)
    assert not found.isNull() and found.charFormat().property(PROP_MESSAGE) == 1
    return char_point(window.chat_view, found.selectionStart())


def test_a_text_in_a_probability_column_draws_and_clicks(qtbot, tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    cid = stored_reply(path, [TokenSpan(TokenKind.ACCEPTED, "hello", 1, 0.5, 0.5, DETAIL)])
    poke(path, "UPDATE spans SET target_prob = 'abc', draft_prob = 'def'")
    window = _window(qtbot, path, cid)
    window.chat_view.set_show_verdicts(True)  # the view that prints the probabilities
    qtbot.mouseClick(window.chat_view.viewport(), Qt.MouseButton.LeftButton, pos=_token_point(window, "hello"))
    qtbot.waitUntil(lambda: window.chat_view.xray is not None and window.chat_view.xray.isVisible())
    assert window.chat_view.xray is not None and "n/a" in window.chat_view.xray.probs.text()
    window.close()


def test_the_xray_draws_a_bounded_part_of_a_huge_detail(qtbot, tmp_path: Path) -> None:
    """A stored top list of 200,000 entries and a 20 MB token: the X-ray shows 5 entries and 80 characters."""
    path = tmp_path / "chats.sqlite3"
    cid = stored_reply(path, [TokenSpan(TokenKind.ACCEPTED, "tok", 1, 0.5, 0.5, DETAIL)])
    huge = '[1,"model",0,1,[' + ",".join(['"' + "y" * 20_000_000 + '",0.5'] + ['"e",0.1'] * 200_000) + "],[]]"
    poke(path, "UPDATE spans SET detail = ?", huge)
    window = _window(qtbot, path, cid)
    qtbot.mouseClick(window.chat_view.viewport(), Qt.MouseButton.LeftButton, pos=_token_point(window, "tok"))
    qtbot.waitUntil(lambda: window.chat_view.xray is not None and window.chat_view.xray.isVisible())
    xray = window.chat_view.xray
    assert xray is not None
    assert xray.tops.text().count("0.100") == 4 and len(xray.tops.text()) < 2000
    assert "y" * MAX_SHOWN_CHARS + "\u2026" in xray.tops.text()
    window.close()


def test_a_race_far_in_the_future_replays_without_overflow(qtbot) -> None:
    figures = ReplyFigures(timeline=[(3_000_000.0, 1, 2)])
    record = RaceRecord(RaceRun("ab", [(3_000_000.0, 1, 2)], 0.1, "eos"), RaceRun("ab", [(1e300, 1, 2)], 0.1, "eos"))
    panel = RacePanel(Message("assistant", "ab", figures=figures), record)
    qtbot.addWidget(panel)
    panel.start()  # both used to raise OverflowError from QTimer.start
    assert panel.replay.running and panel.replay.timer.interval() == MAX_TIMER_MS
    panel.close()


def test_a_long_word_of_many_tokens_draws_in_bounded_formats(qtbot, tmp_path: Path) -> None:
    """100,000 tokens with no space between them: past MAX_UNBROKEN_SPANS the word is drawn in one format,
    since Qt lays out a word in time quadratic in its formats (defect 8: 42 s to reopen)."""
    path = tmp_path / "chats.sqlite3"
    cid = stored_reply(path, [TokenSpan(TokenKind.ACCEPTED, "x", i, 0.5, 0.5) for i in range(100_000)])
    window = _window(qtbot, path, cid)
    block = window.chat_view.document().find("xxxx").block()
    fragments, it = 0, block.begin()
    while not it.atEnd():
        fragments += 1
        it += 1
    assert block.text().startswith("x" * 100_000) and fragments <= MAX_UNBROKEN_SPANS + 3  # and the end note
    window.close()


def _poisoned_folders(root: Path) -> dict[str, str]:
    """Data and config folders whose every file read at start holds a bad value; the app's folder variables."""
    data, config, cache = root / "data", root / "config", root / "cache"
    for folder in (data, config, cache):
        folder.mkdir(parents=True)
    cid = stored_reply(
        data / "conversations.sqlite3", [TokenSpan(TokenKind.ACCEPTED, f"w{i} ", 1, 0.5, 0.5, DETAIL) for i in range(3)]
    )
    for sql in (
        "UPDATE messages SET stats = 'garbage{' WHERE role = 'assistant'",
        "UPDATE spans SET target_prob = 'abc', detail = '" + "[" * 100_000 + "' WHERE seq = 0",
        "UPDATE spans SET kind = 'bogus' WHERE seq = 2",
        "UPDATE messages SET parent_id = (SELECT max(id) FROM messages) WHERE parent_id IS NULL",
    ):
        poke(data / "conversations.sqlite3", sql)
    (config / "settings.json").write_text(
        '{"window_geometry": "\\ud800", "last_conversation": ' + str(cid) + ', "lookup_memory": true}', encoding="utf-8"
    )
    (config / "remote-devices.json").write_text("[" * 100_000, encoding="utf-8")
    (data / "lookup-memory.json").write_text('{"version": 1, "texts": "' + "[" * 1000 + '"}', encoding="utf-8")
    (data / "advisor-results.json").write_text("{" * 100_000, encoding="utf-8")
    (cache / "gguf-index.json").write_text("[1, 2]", encoding="utf-8")
    return {"SPECCHAT_DATA_DIR": str(data), "SPECCHAT_CONFIG_DIR": str(config), "SPECCHAT_CACHE_DIR": str(cache)}


QUIT_SOON = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from specchat.__main__ import main

app = QApplication(sys.argv[:1])
def done():
    shown = [w.windowTitle() for w in app.topLevelWidgets() if w.isVisible()]
    print("shown:", shown, flush=True)
    app.quit()
QTimer.singleShot(0, lambda: QTimer.singleShot(500, done))
sys.exit(main([]))
"""


def test_the_real_app_opens_on_poisoned_files_and_quits_cleanly(tmp_path: Path) -> None:
    """``specchat`` (the window, as ``python -m specchat`` runs it) on a poisoned data and config folder."""
    env = {**os.environ, **_poisoned_folders(tmp_path / "dirs"), "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run([sys.executable, "-c", QUIT_SOON], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "shown: ['poisoned — specchat']" in done.stdout  # the last conversation reopened, bad rows and all
    for said in ("settings.json", "remote-devices.json", "conversations.sqlite3"):
        assert said in done.stderr
    assert "Traceback" not in done.stderr and "QThread" not in done.stderr
