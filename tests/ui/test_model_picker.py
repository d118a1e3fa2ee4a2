"""The model picker: catalog, local library, compatibility verdict before loading, download errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from specchat.core.models.demo import DemoPair
from specchat.core.models.pairs import compatibility_text
from specchat.ui.model_picker import ModelPickerDialog
from support.gguf_files import GgufMaker
from support.hubserver import FakeHub
from support.picker import catalog_pair_selected, verdict_in
from support.qt_items import tree_row


def test_verdicts_without_models(tmp_path: Path) -> None:
    assert compatibility_text("", "") == "choose a target model"
    assert compatibility_text(str(tmp_path / "nope.gguf"), "") == "target file not found"
    target = tmp_path / "t.gguf"
    target.write_bytes(b"GGUF")
    assert compatibility_text(str(target), "").startswith("cannot check: ")  # alone, it is read for MTP heads
    assert compatibility_text(str(target), str(tmp_path / "missing.gguf")) == "draft file not found"
    bad_draft = tmp_path / "d.gguf"
    bad_draft.write_bytes(b"junk")
    verdict = compatibility_text(str(target), str(bad_draft))
    assert verdict.startswith("cannot check") and "\n" not in verdict


def test_files_tab_emits_the_pair(qtbot: QtBot, tmp_path: Path) -> None:
    target = tmp_path / "t.gguf"
    target.write_bytes(b"GGUF")
    dialog = ModelPickerDialog(str(target), "")
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.load_button.isEnabled() and dialog.load_button.isVisible()
    dialog.tabs.setCurrentIndex(1)
    assert not dialog.load_button.isVisible()  # the other tabs load with their own buttons
    dialog.tabs.setCurrentIndex(0)
    with qtbot.waitSignal(dialog.load_requested) as blocker:
        dialog.load_button.click()
    assert blocker.args == [str(target), ""]


def test_catalog_lists_pairs_and_offers_the_demo(qtbot: QtBot) -> None:
    dialog = ModelPickerDialog()
    qtbot.addWidget(dialog)
    tab = dialog.catalog_tab
    assert tab is not None
    assert tab.tree.topLevelItemCount() >= 2
    pair = tab.selected_pair()
    assert pair is not None and pair.local and tab.get_button.text() == "Load pair"
    with qtbot.waitSignal(dialog.demo_requested):
        tab.get_button.click()


def test_catalog_download_failure_is_one_line(qtbot: QtBot) -> None:
    dialog = ModelPickerDialog()
    qtbot.addWidget(dialog)
    tab = dialog.catalog_tab
    assert tab is not None
    tab.tree.setCurrentItem(tree_row(tab.tree, 1))
    assert tab.get_button.text() == "Download"
    tab.get_button.click()
    assert tab.worker is not None and tab.cancel_button.isVisibleTo(tab) and not tab.get_button.isEnabled()
    with qtbot.waitSignal(tab.download_failed, timeout=120_000) as blocker:
        tab.cancel_button.click()
    assert blocker.args[0] and "\n" not in blocker.args[0] and tab.status.text() == blocker.args[0]
    assert tab.worker is None and tab.get_button.isEnabled()
    assert tree_row(tab.tree, 1).text(tab.STATE_COLUMN) == "not downloaded"


@pytest.mark.slow
def test_library_finds_local_files_and_verdict_before_loading(
    qtbot: QtBot, demo_pair: DemoPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECCHAT_MODEL_DIRS", f"{demo_pair.target.parent}:{demo_pair.draft.parent}")
    dialog = ModelPickerDialog()
    qtbot.addWidget(dialog)
    tab = dialog.library_tab
    assert tab is not None
    qtbot.waitUntil(lambda: tab.tree.topLevelItemCount() >= 2, timeout=60_000)
    paths = {tree_row(tab.tree, i).text(4): i for i in range(tab.tree.topLevelItemCount())}
    tab.tree.setCurrentItem(tree_row(tab.tree, paths[str(demo_pair.target)]))
    tab.target_button.click()
    tab.tree.setCurrentItem(tree_row(tab.tree, paths[str(demo_pair.draft)]))
    tab.draft_button.click()
    assert dialog.tabs.currentIndex() == 0
    assert verdict_in(qtbot, dialog).startswith("✓ compatible")
    with qtbot.waitSignal(dialog.load_requested) as blocker:
        dialog.load_button.click()
    assert blocker.args == [str(demo_pair.target), str(demo_pair.draft)]


FAKE_CATALOG = """{"pairs": [
  {"id": "demo", "name": "Offline demo", "local": true, "memory_gb": 1, "license": "apache-2.0", "good_for": "demo",
   "target": {"repo": "x/demo", "quant": "F32", "size_gb": 0.5},
   "draft": {"repo": "x/demo", "quant": "Q4_1", "size_gb": 0.1}},
  {"id": "tiny", "name": "Tiny 1B + 100M", "memory_gb": 1, "license": "apache-2.0", "good_for": "tests",
   "target": {"repo": "fake/Tiny-1B-GGUF", "quant": "Q4_K_M", "size_gb": 0.001},
   "draft": {"repo": "fake/Tiny-100M-GGUF", "quant": "Q8_0", "size_gb": 0.001}}
]}"""


def test_catalog_download_from_the_loopback_hub_shows_progress_and_verdict(
    qtbot: QtBot, hub: FakeHub, make_gguf: GgufMaker, monkeypatch: pytest.MonkeyPatch, app_dirs: dict[str, Path]
) -> None:
    """A catalog pair downloads from the (fake) hub with a moving progress bar, then shows its verdict."""
    from specchat.core.models import catalog
    from specchat.ui import model_sources

    # target and draft share a vocabulary; the target (3 MiB) spans several of the downloader's 1 MiB chunks
    target = make_gguf("tiny-1b-q4_k_m.gguf", basename="Tiny", size_label="1B", tensor_elements=768 * 1024)
    draft = make_gguf("tiny-100m-q8_0.gguf", basename="Tiny", size_label="100M", tensor_elements=64)
    hub.add("fake/Tiny-1B-GGUF", "Tiny-1B-Q4_K_M.gguf", target.read_bytes())
    hub.add("fake/Tiny-1B-GGUF", "Tiny-1B-Q8_0.gguf", b"not this one")
    hub.add("fake/Tiny-100M-GGUF", "Tiny-100M-Q8_0.gguf", draft.read_bytes())
    hub.throttle = 0.001  # per 8 KiB: progress reports arrive one by one
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setattr(model_sources, "load_catalog", lambda: catalog.parse_catalog(FAKE_CATALOG))

    dialog, item = catalog_pair_selected(qtbot, "tiny")
    tab = dialog.catalog_tab
    assert tab is not None
    assert tab.get_button.text() == "Download"

    qtbot.mouseClick(tab.get_button, Qt.MouseButton.LeftButton)
    assert tab.worker is not None and tab.progress.isVisible() and tab.cancel_button.isVisible()
    assert item.text(tab.STATE_COLUMN) == "downloading…"
    shown: list[tuple[str, int]] = []  # (file, percent) as the bar showed them, after each report reached it
    tab.progressed.connect(  # connected after the tab's own slot, so it sees the bar already updated
        lambda label, done, total: shown.append((label.split(":")[0], round(100 * tab.progress.value() / 1000)))
    )
    with qtbot.waitSignal(tab.pair_downloaded, timeout=60_000) as blocker:
        pass

    target_percents = [p for label, p in shown if label == "target"]
    assert len(set(target_percents)) >= 2, shown
    assert any(0 < p < 100 for p in target_percents), shown  # the bar moved in steps, not straight to the end
    assert target_percents == sorted(target_percents)
    assert shown[-1] == ("draft", 100) and target_percents[-1] == 100

    assert item.text(tab.STATE_COLUMN) == "✓ compatible"
    verdict = tab.status.text()
    assert tab.status.isVisible() and verdict.startswith("Downloaded: ✓ compatible: "), verdict
    assert not tab.progress.isVisible() and not tab.cancel_button.isVisible()
    assert verdict.endswith(verdict_in(qtbot, dialog))  # the Files tab holds the pair and says the same
    assert tab.get_button.text() == "Load pair" and tab.get_button.isEnabled()

    cache = app_dirs["hf"] / "hub"
    paths = tab.downloaded["tiny"]
    assert [dialog.target_field.path, dialog.draft_field.path] == list(paths) == blocker.args
    for path, name, data in (
        (paths[0], "Tiny-1B-Q4_K_M.gguf", target.read_bytes()),
        (paths[1], "Tiny-100M-Q8_0.gguf", draft.read_bytes()),
    ):
        assert Path(path).name == name and Path(path).is_relative_to(cache)
        assert Path(path).read_bytes() == data
    assert not hub.gets("Tiny-1B-Q8_0.gguf")

    with qtbot.waitSignal(dialog.load_requested) as blocker:
        qtbot.mouseClick(tab.get_button, Qt.MouseButton.LeftButton)
    assert blocker.args == list(paths)


def test_catalog_marks_pairs_already_in_the_cache(
    qtbot: QtBot, hub: FakeHub, make_gguf: GgufMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pair downloaded earlier shows its verdict when the picker opens, with no network."""
    from specchat.core.models import catalog
    from specchat.core.models.download import download_quant
    from specchat.ui import model_sources

    target = make_gguf("t.gguf", size_label="1B", tensor_elements=64 * 1024)
    hub.add("fake/Tiny-1B-GGUF", "Tiny-1B-Q4_K_M.gguf", target.read_bytes())
    hub.add("fake/Tiny-100M-GGUF", "Tiny-100M-Q8_0.gguf", make_gguf("d.gguf", size_label="100M").read_bytes())
    download_quant("fake/Tiny-1B-GGUF", "Q4_K_M", endpoint=hub.url)
    download_quant("fake/Tiny-100M-GGUF", "Q8_0", endpoint=hub.url)
    monkeypatch.setattr(model_sources, "load_catalog", lambda: catalog.parse_catalog(FAKE_CATALOG))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: the check must not need the hub
    before = len(hub.requests)

    dialog = ModelPickerDialog()
    qtbot.addWidget(dialog)
    tab = dialog.catalog_tab
    assert tab is not None
    item = tab.item_for("tiny")
    assert item is not None
    qtbot.waitUntil(lambda: item.text(tab.STATE_COLUMN) != "checking…")
    assert item.text(tab.STATE_COLUMN) == "✓ compatible"
    tab.tree.setCurrentItem(item)
    assert tab.get_button.text() == "Load pair"
    assert tab.status.text().startswith("On this computer: ✓ compatible: ")
    with qtbot.waitSignal(dialog.load_requested):
        tab.get_button.click()
    assert len(hub.requests) == before

    # Once the draft finder has measured the pair here, its row says so.
    from specchat.core.advise import cache

    target_path, draft_path = tab.downloaded["tiny"]
    cache.store([cache.CachedResult(str(target_path), "draft", str(draft_path), 5, 1.4, 1.3, 1.38, 0.8, 1.0)])
    again = ModelPickerDialog()
    qtbot.addWidget(again)
    again_tab = again.catalog_tab
    assert again_tab is not None
    row = again_tab.item_for("tiny")
    assert row is not None
    qtbot.waitUntil(lambda: row.text(again_tab.STATE_COLUMN) != "checking…")
    assert row.text(again_tab.STATE_COLUMN) == "✓ compatible · measured here: 1.38x at depth 5"


def test_files_tab_says_whether_the_pair_fits(qtbot: QtBot, demo_pair: DemoPair, tmp_path: Path) -> None:
    from specchat.core.models.fit import GB, MachineMemory
    from specchat.core.models.shape import read_model_shape

    need = read_model_shape(demo_pair.target).memory_bytes(2048) + read_model_shape(demo_pair.draft).memory_bytes(2048)
    roomy = ModelPickerDialog(
        str(demo_pair.target), str(demo_pair.draft), n_ctx=2048, memory=MachineMemory(ram_free=16 * 10**9, gpu_free=0)
    )
    qtbot.addWidget(roomy)
    verdict_in(qtbot, roomy)
    assert roomy.fit.text() == f"✓ the pair needs about {need / GB:.1f} GB of RAM; 16.0 GB is free"
    cramped = ModelPickerDialog(
        str(demo_pair.target),
        str(demo_pair.draft),
        n_ctx=2048,
        memory=MachineMemory(ram_free=int(need) // 2, gpu_free=0),
    )
    qtbot.addWidget(cramped)
    verdict_in(qtbot, cramped)
    assert cramped.fit.text().startswith("✗ the pair needs about")
    # Editing the fields updates the line; a broken file gets a one-line reason, no file gets nothing.
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF")
    cramped.target_field.edit.setText(str(broken))
    verdict_in(qtbot, cramped)
    assert cramped.fit.text().startswith("cannot tell: ") and "\n" not in cramped.fit.text()
    cramped.target_field.edit.setText("")
    assert verdict_in(qtbot, cramped) == "choose a target model"
    assert cramped.fit.text() == ""


def test_catalog_marks_pairs_too_big_for_this_machine(qtbot: QtBot) -> None:
    from specchat.core.models.fit import MachineMemory

    dialog = ModelPickerDialog(memory=MachineMemory(ram_free=4 * 10**9, gpu_free=0))
    qtbot.addWidget(dialog)
    tab = dialog.catalog_tab
    assert tab is not None
    rows = {
        tree_row(tab.tree, i).data(0, Qt.ItemDataRole.UserRole): tree_row(tab.tree, i)
        for i in range(tab.tree.topLevelItemCount())
    }
    memory = tab.MEMORY_COLUMN
    assert rows["demo"].text(memory) == "1 GB ✓" and rows["demo"].toolTip(memory).startswith("✓ this pair needs")
    big = rows["qwen2.5-coder-32b"]
    assert big.text(memory) == "24 GB ✗" and "only 4.0 GB is free" in big.toolTip(memory)


def test_library_says_which_downloads_are_unverified(
    qtbot: QtBot, hub: FakeHub, make_gguf: GgufMaker, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A file the hub gave no SHA-256 for is marked unverified in the library; one checked by its hash is not."""
    from specchat.core.models.download import download_quant
    from specchat.ui.model_sources import LibraryTab

    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # only the hub cache holds models
    monkeypatch.delenv("LLAMA_CACHE", raising=False)
    monkeypatch.delenv("SPECCHAT_MODEL_DIRS", raising=False)
    hub.add("fake/Tiny-1B-GGUF", "Tiny-1B-Q4_K_M.gguf", make_gguf("t.gguf", basename="Target").read_bytes())
    hub.add("fake/Tiny-100M-GGUF", "Tiny-100M-Q8_0.gguf", make_gguf("d.gguf", basename="Draft").read_bytes())
    [checked] = download_quant("fake/Tiny-100M-GGUF", "Q8_0", endpoint=hub.url)
    hub.etag_header = "5f2b-1a3"  # a mirror's ETag that is no content hash
    [unchecked] = download_quant("fake/Tiny-1B-GGUF", "Q4_K_M", endpoint=hub.url)
    assert checked.verified and not unchecked.verified

    dialog = ModelPickerDialog()
    qtbot.addWidget(dialog)
    tab = dialog.library_tab
    assert tab is not None
    qtbot.waitUntil(lambda: tab.tree.topLevelItemCount() == 2, timeout=30_000)
    rows = {Path(tree_row(tab.tree, i).text(LibraryTab.PATH_COLUMN)).name: tree_row(tab.tree, i) for i in range(2)}
    flagged, plain = rows["Tiny-1B-Q4_K_M.gguf"], rows["Tiny-100M-Q8_0.gguf"]
    assert flagged.text(LibraryTab.SOURCE_COLUMN) == "Hugging Face cache, unverified"
    tip = flagged.toolTip(LibraryTab.SOURCE_COLUMN)
    assert tip == "unverified: the hub gave no SHA-256 for it, only its size was checked"
    assert plain.text(LibraryTab.SOURCE_COLUMN) == "Hugging Face cache"
    assert plain.toolTip(LibraryTab.SOURCE_COLUMN) == ""
    assert tab.status.text() == "2 GGUF file(s) found, 1 unverified"

    # The file chosen here goes to the Files tab by the tab's signal.
    tab.tree.setCurrentItem(flagged)
    with qtbot.waitSignal(tab.file_chosen) as blocker:
        tab.target_button.click()
    assert blocker.args == ["target", str(unchecked.path)] and dialog.target_field.path == str(unchecked.path)
    assert dialog.tabs.currentIndex() == 0


def test_catalog_shows_the_drafter_an_expected_speedup_and_the_full_reason(qtbot: QtBot) -> None:
    from specchat.core.models.catalog import load_catalog

    dialog = ModelPickerDialog()
    qtbot.addWidget(dialog)
    tab = dialog.catalog_tab
    assert tab is not None
    rows = {
        tree_row(tab.tree, i).data(0, Qt.ItemDataRole.UserRole): tree_row(tab.tree, i)
        for i in range(tab.tree.topLevelItemCount())
    }
    by_id = {p.id: p for p in load_catalog()}
    mtp = next(p for p in by_id.values() if p.builtin_heads)
    assert rows[mtp.id].text(tab.DRAFTER_COLUMN) == "own MTP heads"
    assert "nothing else to download" in rows[mtp.id].toolTip(tab.DRAFTER_COLUMN)
    assert rows["qwen2.5-coder-32b"].text(tab.DRAFTER_COLUMN) == "draft model"
    for pid, row in rows.items():
        assert row.text(tab.SPEEDUP_COLUMN), pid  # every pair says what to expect, and how it knows
        assert (
            "published" in row.toolTip(tab.SPEEDUP_COLUMN)
            or "measured" in row.toolTip(tab.SPEEDUP_COLUMN)
            or "estimate" in row.toolTip(tab.SPEEDUP_COLUMN)
        ), pid
        assert row.text(tab.GOOD_FOR_COLUMN) == by_id[pid].good_for  # the whole text, wrapped, never cut
    assert tab.tree.wordWrap()


@pytest.mark.slow
def test_the_library_lists_a_loaded_model_outside_the_scanned_folders(
    qtbot: QtBot, demo_pair: DemoPair, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPECCHAT_MODEL_DIRS", str(tmp_path))  # the demo draft lives in site-packages
    dialog = ModelPickerDialog(str(demo_pair.target), str(demo_pair.draft))
    qtbot.addWidget(dialog)
    tab = dialog.library_tab
    assert tab is not None
    qtbot.waitUntil(lambda: tab.tree.topLevelItemCount() >= 2, timeout=60_000)
    items = [tree_row(tab.tree, i) for i in range(tab.tree.topLevelItemCount())]
    listed = {item.text(tab.PATH_COLUMN): item for item in items}
    draft = listed[str(demo_pair.draft)]
    assert draft.text(tab.SOURCE_COLUMN) == "offline demo"  # not "in use": where it comes from, in words
    # the file's name, not the converter's title-cased "Smollm2 135M 8k Lc100K Mix1 Ep2" from inside it
    assert draft.text(0) == "SmolLM2-135M-Instruct"
    assert draft.toolTip(0) == "SmolLM2-135M-Instruct.Q4_1.gguf\nname inside the file: Smollm2 135M 8k Lc100K Mix1 Ep2"


def test_the_library_names_files_readably_and_says_where_they_are(
    qtbot: QtBot, make_gguf: GgufMaker, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLAMA_CACHE", raising=False)
    folder = tmp_path / "mine"
    monkeypatch.setenv("SPECCHAT_MODEL_DIRS", str(folder))
    make_gguf("../mine/qwen2.5-0.5b-instruct-q8_0.gguf", general_name="Qwen2.5 0.5B Instruct")
    make_gguf("../mine/SmolLM2-360M-Instruct-Q4_K_M.gguf", general_name="Smollm2 360M 8k Lc100K Mix1 Ep2")
    make_gguf("../mine/model.gguf", general_name="Tiny Target")
    elsewhere = make_gguf("elsewhere/Other-1B-Q8_0.gguf", general_name="Other 1B")
    dialog = ModelPickerDialog(str(elsewhere), "")
    qtbot.addWidget(dialog)
    tab = dialog.library_tab
    assert tab is not None
    qtbot.waitUntil(lambda: tab.tree.topLevelItemCount() == 4, timeout=30_000)
    rows = {
        Path(tree_row(tab.tree, i).text(tab.PATH_COLUMN)).name: (
            tree_row(tab.tree, i).text(0),
            tree_row(tab.tree, i).text(tab.SOURCE_COLUMN),
        )
        for i in range(4)
    }
    assert rows == {
        "qwen2.5-0.5b-instruct-q8_0.gguf": ("Qwen2.5 0.5B Instruct", "your folder"),
        "SmolLM2-360M-Instruct-Q4_K_M.gguf": ("SmolLM2-360M-Instruct", "your folder"),
        "model.gguf": ("Tiny Target", "your folder"),
        "Other-1B-Q8_0.gguf": ("Other 1B", "in use (its folder is not scanned)"),
    }
