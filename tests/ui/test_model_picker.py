"""The model picker: catalog, local library, compatibility verdict before loading, download errors."""

from __future__ import annotations

import pytest

from specchat.ui.model_picker import ModelPickerDialog, compatibility_text


def test_verdicts_without_models(tmp_path) -> None:  # noqa: ANN001
    assert compatibility_text("", "") == "choose a target model"
    assert compatibility_text(str(tmp_path / "nope.gguf"), "") == "target file not found"
    target = tmp_path / "t.gguf"
    target.write_bytes(b"GGUF")
    assert "no draft" in compatibility_text(str(target), "")
    assert compatibility_text(str(target), str(tmp_path / "missing.gguf")) == "draft file not found"
    bad_draft = tmp_path / "d.gguf"
    bad_draft.write_bytes(b"junk")
    verdict = compatibility_text(str(target), str(bad_draft))
    assert verdict.startswith("cannot check") and "\n" not in verdict


def test_files_tab_emits_the_pair(qtbot, tmp_path) -> None:  # noqa: ANN001
    target = tmp_path / "t.gguf"
    target.write_bytes(b"GGUF")
    dialog = ModelPickerDialog(str(target), "")
    qtbot.addWidget(dialog)
    assert dialog.load_button.isEnabled()
    with qtbot.waitSignal(dialog.load_requested) as blocker:
        dialog.load_button.click()
    assert blocker.args == [str(target), ""]


def test_catalog_lists_pairs_and_offers_the_demo(qtbot) -> None:  # noqa: ANN001
    dialog = ModelPickerDialog()
    qtbot.addWidget(dialog)
    tab = dialog.catalog_tab
    assert tab.tree.topLevelItemCount() >= 2
    assert tab.selected_pair().local and tab.get_button.text() == "Load pair"
    with qtbot.waitSignal(dialog.demo_requested):
        tab.get_button.click()


def test_catalog_download_failure_is_one_line(qtbot) -> None:  # noqa: ANN001
    dialog = ModelPickerDialog()
    qtbot.addWidget(dialog)
    tab = dialog.catalog_tab
    tab.tree.setCurrentItem(tab.tree.topLevelItem(1))
    assert tab.get_button.text() == "Download and load"
    tab.get_button.click()
    assert tab.job is not None and tab.cancel_button.isVisibleTo(tab)
    job = tab.job
    with qtbot.waitSignal(job.failed, timeout=120_000) as blocker:
        job.cancel.cancel()
    assert blocker.args[0] and "\n" not in blocker.args[0]
    assert tab.job is None and tab.get_button.isEnabled()


@pytest.mark.slow
def test_library_finds_local_files_and_verdict_before_loading(qtbot, demo_pair, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("SPECCHAT_MODEL_DIRS", f"{demo_pair.target.parent}:{demo_pair.draft.parent}")
    dialog = ModelPickerDialog()
    qtbot.addWidget(dialog)
    tab = dialog.library_tab
    qtbot.waitUntil(lambda: tab.tree.topLevelItemCount() >= 2, timeout=60_000)
    paths = {tab.tree.topLevelItem(i).text(4): i for i in range(tab.tree.topLevelItemCount())}
    tab.tree.setCurrentItem(tab.tree.topLevelItem(paths[str(demo_pair.target)]))
    tab.target_button.click()
    tab.tree.setCurrentItem(tab.tree.topLevelItem(paths[str(demo_pair.draft)]))
    tab.draft_button.click()
    assert dialog.tabs.currentIndex() == 0
    assert dialog.verdict.text().startswith("✓ compatible")
    with qtbot.waitSignal(dialog.load_requested) as blocker:
        dialog.load_button.click()
    assert blocker.args == [str(demo_pair.target), str(demo_pair.draft)]
