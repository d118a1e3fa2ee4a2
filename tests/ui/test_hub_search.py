"""The picker's hub search against the loopback hub, on real offscreen widgets: search, a repository's files
grouped by quantisation with sizes and verdicts against the loaded target, the draft offered beside a target,
download with progress, cancel and resume, and a hub that answers with nonsense."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from specchat.core.models.download import format_bytes
from specchat.core.models.fit import MachineMemory
from specchat.ui.hub_search import HubSearchTab
from specchat.ui.model_picker import ModelPickerDialog
from support.gguf_files import GgufMaker
from support.hub_models import DRAFT_REPO, STRANGER_REPO, TARGET_REPO, Stocked, stock
from support.hubserver import FakeHub
from support.picker import verdict_in
from support.qt_items import tree_row

ROOMY = MachineMemory(ram_free=16 * 10**9, gpu_free=0)


@pytest.fixture
def stocked(hub: FakeHub, make_gguf: GgufMaker, monkeypatch: pytest.MonkeyPatch) -> Stocked:
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    return stock(hub, make_gguf)


def _picker(qtbot: QtBot, target: str = "") -> tuple[ModelPickerDialog, HubSearchTab]:
    dialog = ModelPickerDialog(target, "", memory=ROOMY, n_ctx=2048)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.tabs.setCurrentWidget(dialog.hub_tab)
    return dialog, dialog.hub_tab


def _search(qtbot: QtBot, tab: HubSearchTab, text: str) -> None:
    with qtbot.waitSignal(tab.searched, timeout=30_000):
        qtbot.keyClicks(tab.query, text)
        assert tab.debounce.isActive()  # typing waits for a pause before asking the hub


def _open(qtbot: QtBot, tab: HubSearchTab, repo: str, *, offer: bool = False) -> None:
    rows = {tree_row(tab.results, i).text(0): tree_row(tab.results, i) for i in range(tab.results.topLevelItemCount())}
    signals = [tab.listed, tab.offered] if offer else [tab.listed]
    with qtbot.waitSignals(signals, timeout=30_000):
        tab.results.setCurrentItem(rows[repo])


def _files(tab: HubSearchTab) -> list[list[str]]:
    return [[tree_row(tab.files, i).text(c) for c in range(4)] for i in range(tab.files.topLevelItemCount())]


def test_search_lists_repositories_with_downloads_likes_and_date(qtbot: QtBot, stocked: Stocked, hub: FakeHub) -> None:
    _, tab = _picker(qtbot)
    _search(qtbot, tab, "tiny")
    rows = [[tree_row(tab.results, i).text(c) for c in range(4)] for i in range(tab.results.topLevelItemCount())]
    assert rows == [
        [TARGET_REPO, "1200", "1", "2024-09-19"],
        [DRAFT_REPO, "800", "1", "2024-08-01"],
        [STRANGER_REPO, "5", "1", ""],
    ]
    assert tab.search_status.text() == "3 repositories"
    _search(qtbot, tab, "-nothing-like-it")
    assert tab.results.topLevelItemCount() == 0 and tab.search_status.text() == "Nothing found"


def test_typing_asks_the_hub_once_per_pause(qtbot: QtBot, stocked: Stocked, hub: FakeHub) -> None:
    _, tab = _picker(qtbot)
    with qtbot.waitSignal(tab.searched, timeout=30_000):
        for text in ("t", "ti", "tin", "tiny"):  # one turn of the event loop: the timer cannot fire between
            tab.query.setText(text)
        assert tab.search_status.text() == ""  # not yet asked
    searches = [r for r in hub.requests if r.path == "/api/models"]
    assert len(searches) == 1 and tab.results.topLevelItemCount() == 3
    searches_before = len(searches) + 1
    with qtbot.waitSignal(tab.searched, timeout=30_000):
        tab.query.setText("tiny/")
        tab.run_search()  # Enter searches at once
        assert tab.search_status.text() == "Searching…" and not tab.debounce.isActive()
    tab.query.setText("t")  # too short: the list empties, the hub is not asked
    tab.run_search()
    assert tab.results.topLevelItemCount() == 0
    assert len([r for r in hub.requests if r.path == "/api/models"]) == searches_before


def test_a_repository_shows_its_quantisations_with_sizes_verdicts_and_the_draft_beside_it(
    qtbot: QtBot, stocked: Stocked
) -> None:
    _, tab = _picker(qtbot, str(stocked.target))
    _search(qtbot, tab, "tiny")
    _open(qtbot, tab, TARGET_REPO, offer=True)
    rows = _files(tab)
    assert [r[0] for r in rows] == ["Q4_K_M", "Q8_0", "F16"]  # grouped, smallest first; side files left out
    q4 = len(stocked.files["Tiny-1B-Q4_K_M.gguf"])
    assert rows[0][1] == format_bytes(q4) and rows[0][2] == "1" and rows[2][2] == "2 parts"
    assert all(r[3].startswith("✓ as a target: the model needs about") for r in rows), rows
    assert tab.repo_label.text() == f"<b>{TARGET_REPO}</b>: 3 model files"
    line = tab.draft_line.text()
    assert line.startswith(f"Draft beside it: {DRAFT_REPO} Q8_0") and "same family on the hub" in line
    assert "✓ compatible" in line
    assert tab.with_draft.isVisible() and tab.download_button.text() == "Download with draft"


def test_files_smaller_than_the_loaded_target_are_judged_as_its_draft(qtbot: QtBot, stocked: Stocked) -> None:
    _, tab = _picker(qtbot, str(stocked.target))
    _search(qtbot, tab, "tiny")
    _open(qtbot, tab, DRAFT_REPO)
    assert all(r[3].startswith("✓ as a draft for Tiny 1B: compatible") for r in _files(tab)), _files(tab)
    assert tab.download_button.text() == "Download as draft" and not tab.with_draft.isVisible()
    _open(qtbot, tab, STRANGER_REPO)
    [row] = _files(tab)
    assert row[3].startswith("✗ as a draft for Tiny 1B: incompatible: different tokenizers"), row


def test_download_a_target_with_its_draft_shows_progress_and_fills_the_files_tab(
    qtbot: QtBot, stocked: Stocked, hub: FakeHub, app_dirs: dict[str, Path]
) -> None:
    dialog, tab = _picker(qtbot)
    _search(qtbot, tab, "tiny")
    _open(qtbot, tab, TARGET_REPO, offer=True)
    hub.throttle = 0.001  # per 8 KiB: progress reports arrive one by one
    shown: list[tuple[str, int]] = []
    tab.progressed.connect(lambda label, done, total: shown.append((label.split(":")[0], tab.progress.value())))
    with qtbot.waitSignal(tab.pair_downloaded, timeout=60_000) as blocker:
        qtbot.mouseClick(tab.download_button, Qt.MouseButton.LeftButton)
        assert tab.progress.isVisible() and tab.cancel_button.isVisible() and not tab.download_button.isEnabled()
    target_steps = [v for role, v in shown if role == "target"]
    assert any(0 < v < 1000 for v in target_steps) and target_steps == sorted(target_steps), shown
    assert shown[-1] == ("draft", 1000)
    target, draft = blocker.args
    assert Path(target).name == "Tiny-1B-Q4_K_M.gguf" and Path(draft).name == "Tiny-100M-Q8_0.gguf"
    assert Path(target).read_bytes() == stocked.files["Tiny-1B-Q4_K_M.gguf"]
    assert Path(draft).read_bytes() == stocked.files["Tiny-100M-Q8_0.gguf"]
    assert Path(target).is_relative_to(app_dirs["hf"])
    assert [dialog.target_field.path, dialog.draft_field.path] == [target, draft]
    assert verdict_in(qtbot, dialog).startswith("✓ compatible")
    assert (
        tab.status.text() == "Downloaded Tiny-1B-Q4_K_M.gguf with Tiny-100M-Q8_0.gguf: in the Files tab, ready to load"
    )
    assert not tab.progress.isVisible() and tab.download_button.isEnabled()


def test_a_draft_downloads_beside_the_loaded_target(qtbot: QtBot, stocked: Stocked) -> None:
    dialog, tab = _picker(qtbot, str(stocked.target))
    _search(qtbot, tab, "tiny")
    _open(qtbot, tab, DRAFT_REPO)
    tab.files.setCurrentItem(tree_row(tab.files, 1))  # Q8_0
    with qtbot.waitSignal(tab.pair_downloaded, timeout=60_000) as blocker:
        tab.download_button.click()
    assert blocker.args[0] == str(stocked.target) and Path(blocker.args[1]).name == "Tiny-100M-Q8_0.gguf"
    assert dialog.draft_field.path == blocker.args[1]


def test_cancel_keeps_the_part_received_and_download_resumes_it(qtbot: QtBot, stocked: Stocked, hub: FakeHub) -> None:
    _, tab = _picker(qtbot)
    _search(qtbot, tab, "tiny")
    _open(qtbot, tab, TARGET_REPO, offer=True)
    tab.with_draft.setChecked(False)
    assert tab.download_button.text() == "Download"
    hub.hold_after = 64 * 1024  # the file's GET sends this much, then waits
    tab.download_button.click()
    qtbot.waitUntil(lambda: tab.progress.value() > 0, timeout=30_000)  # the first 64 KiB arrived
    assert tab.status.text().startswith("Downloading target Tiny-1B-Q4_K_M.gguf, ")
    with qtbot.waitSignal(tab.download_failed, timeout=30_000) as blocker:
        tab.cancel_button.click()
    message = blocker.args[0]
    assert message.startswith(f"Download of {TARGET_REPO} Q4_K_M cancelled") and "\n" not in message
    assert tab.status.text() == message and tab.download_button.isEnabled() and not tab.progress.isVisible()

    hub.hold_after = None
    with qtbot.waitSignal(tab.pair_downloaded, timeout=60_000) as done:
        tab.download_button.click()
    assert Path(done.args[0]).read_bytes() == stocked.files["Tiny-1B-Q4_K_M.gguf"] and done.args[1] == ""
    gets = [r.range for r in hub.gets("Tiny-1B-Q4_K_M.gguf") if not (r.range or "").startswith("bytes=0-")]
    assert gets == [None, f"bytes={64 * 1024}-"], gets  # the second download asked only for the rest


@pytest.mark.parametrize(
    "trouble",
    [
        {"raw_api": ("text/html", b"<html><body>Welcome to nginx!</body></html>")},
        {"raw_api": ("application/json", b'{"error": "no"}')},
        {"api_status": 500},
        {"stall_api": 30.0},
    ],
    ids=["html", "wrong-shape", "500", "no-answer"],
)
def test_a_hub_that_answers_nonsense_gets_one_line(
    qtbot: QtBot, stocked: Stocked, hub: FakeHub, monkeypatch: pytest.MonkeyPatch, trouble: dict[str, object]
) -> None:
    from specchat.core.models import hub_browse

    monkeypatch.setattr(hub_browse, "SEARCH_TIMEOUT", 1.0)
    _, tab = _picker(qtbot)
    for name, value in trouble.items():
        setattr(hub, name, value)
    _search(qtbot, tab, "tiny")
    line = tab.search_status.text()
    assert line and line != "Searching…" and "\n" not in line and tab.results.topLevelItemCount() == 0, line
    assert hub.url in line or "no answer in 1 s" in line, line
    _let_abandoned_calls_end(hub)


def test_a_listing_that_fails_is_one_line(qtbot: QtBot, stocked: Stocked, hub: FakeHub) -> None:
    _, tab = _picker(qtbot)
    _search(qtbot, tab, "tiny")
    hub.raw_api = ("text/html", b"<html>maintenance</html>")
    _open(qtbot, tab, TARGET_REPO)
    text = tab.repo_label.text()
    assert "is not a hub answer" in text and "\n" not in text and tab.files.topLevelItemCount() == 0
    assert not tab.download_button.isEnabled()


def test_a_newer_search_cancels_the_one_before(qtbot: QtBot, stocked: Stocked, hub: FakeHub) -> None:
    _, tab = _picker(qtbot)
    hub.stall_api = 30.0  # the first search hangs
    tab.query.setText("tiny")
    tab.run_search()
    qtbot.waitUntil(lambda: any(r.path == "/api/models" for r in hub.requests), timeout=30_000)
    assert tab.search_status.text() == "Searching…"
    hub.stall_api = 0.0
    with qtbot.waitSignal(tab.searched, timeout=30_000):
        tab.query.setText("100M")
        tab.run_search()
    assert [tree_row(tab.results, i).text(0) for i in range(tab.results.topLevelItemCount())] == [DRAFT_REPO]
    _let_abandoned_calls_end(hub)  # the first answer goes out now: it is dropped, the list stays
    QApplication.processEvents()
    assert tab.results.topLevelItemCount() == 1 and tab.search_status.text() == "1 repository"


def _let_abandoned_calls_end(hub: FakeHub) -> None:
    """Stalled answers go out, so the calls left behind end (and close their sockets) within the test."""
    hub.release.set()
    for thread in threading.enumerate():
        if thread.name == "hub-call":
            thread.join(timeout=30)
