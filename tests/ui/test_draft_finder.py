"""The draft finder dialog offscreen, on real small models: progress, cancel, the table, "Use this"."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from specchat.core.advise import cache
from specchat.core.advise.candidates import CandidateKind
from specchat.core.settings import Settings
from specchat.core.types import DrafterKind
from specchat.ui.draft_finder import COLUMNS, DraftFinderDialog
from specchat.ui.main_window import MainWindow
from specchat.ui.model_picker import ModelPickerDialog
from specchat.ui.worker import ModelInfo
from support.advice import advice_measured_at
from support.fake_host import window_with
from support.picker import verdict_in
from support.qt_items import table_cell

MODELS = Path(__file__).resolve().parents[1] / "models"


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    shutil.copy(MODELS / "llama.gguf", target)
    shutil.copy(MODELS / "llama-q8.gguf", draft)
    return target, draft


def finder(qtbot, target: Path, draft: Path) -> DraftFinderDialog:
    dialog = DraftFinderDialog(str(target), budget=60, named=(str(draft),), library=False)
    qtbot.addWidget(dialog)
    return dialog


def test_progress_table_and_use_this(qtbot, pair) -> None:
    target, draft = pair
    dialog = finder(qtbot, target, draft)
    values: list[int] = []
    dialog.progress_bar.valueChanged.connect(values.append)
    dialog.start()
    assert dialog.running and not dialog.start_button.isEnabled() and dialog.cancel_button.isEnabled()
    qtbot.waitUntil(lambda: "prompt" in dialog.status.text() or not dialog.running, timeout=60_000)
    qtbot.waitUntil(lambda: not dialog.running, timeout=300_000)
    advice = dialog.advice
    assert advice is not None and not advice.cancelled
    assert values and values[-1] == 100 and values == sorted(values)
    assert dialog.table.columnCount() == len(COLUMNS)
    assert dialog.table.rowCount() == len(advice.results)
    labels = [table_cell(dialog.table, row, 0).text() for row in range(dialog.table.rowCount())]
    assert labels == [r.candidate.label for r in advice.results]
    assert set(labels) >= {"draft.gguf", "n-gram lookup"}
    row = labels.index("draft.gguf")
    result = advice.results[row]
    assert result.prediction is not None
    assert table_cell(dialog.table, row, 4).text() == str(result.prediction.best_depth)
    assert table_cell(dialog.table, row, COLUMNS.index("Why")).text() == result.reason
    dialog.table.selectRow(row)
    assert dialog.use_button.isEnabled()
    with qtbot.waitSignal(dialog.use_requested) as blocker:
        dialog.use_button.click()
    assert blocker.args == [str(target), str(draft), "draft", result.prediction.best_depth]


def test_cancel_stops_the_run_and_says_so(qtbot, pair) -> None:
    target, draft = pair
    dialog = finder(qtbot, target, draft)
    dialog.start()
    qtbot.waitUntil(lambda: "draft.gguf" in dialog.status.text() or not dialog.running, timeout=60_000)
    dialog.cancel_button.click()
    qtbot.waitUntil(lambda: not dialog.running, timeout=60_000)
    assert dialog.advice is not None and dialog.advice.cancelled
    assert dialog.status.text().startswith("Cancelled")
    assert dialog.start_button.isEnabled() and not dialog.cancel_button.isEnabled()
    assert not dialog.use_button.isEnabled()


def test_a_failure_is_one_line_in_the_dialog(qtbot, tmp_path: Path) -> None:
    dialog = DraftFinderDialog(str(tmp_path / "gone.gguf"), library=False)
    qtbot.addWidget(dialog)
    dialog.start()
    qtbot.waitUntil(lambda: not dialog.running, timeout=60_000)
    assert dialog.status.text() == f"Could not finish: target model not found: {tmp_path / 'gone.gguf'}"


def test_the_picker_shows_cached_results_and_forwards_the_pick(qtbot, pair) -> None:
    target, draft = pair
    picker = ModelPickerDialog(str(target), str(draft))
    qtbot.addWidget(picker)
    assert "measured here" not in verdict_in(qtbot, picker)
    assert picker.finder_button.isEnabled()
    cache.store([cache.CachedResult(str(target), "draft", str(draft), 5, 1.4, 1.3, 1.38, 0.8, 1.0)])
    picker.draft_field.edit.setText(str(draft) + " ")  # any edit refreshes the verdict line
    assert verdict_in(qtbot, picker).endswith(" · measured here: 1.38x at depth 5")
    st = draft.stat()
    os.utime(draft, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    picker.draft_field.edit.setText(str(draft))
    assert "measured here" not in verdict_in(qtbot, picker)  # the draft changed since

    dialog = picker.open_draft_finder()
    assert dialog.target == str(target)
    with qtbot.waitSignal(picker.advice_chosen) as blocker:
        dialog.use_requested.emit(str(target), str(draft), "draft", 3)
    assert blocker.args == [str(target), str(draft), "draft", 3]
    dialog.close()


def test_the_window_loads_the_pick_with_its_depth_and_drafter(qtbot, store, pair) -> None:
    target, draft = pair
    window, host = window_with(qtbot, Settings(), store, loaded=False)
    assert window.dialogs.draft_finder() is None  # no target yet: an error line instead
    assert "choose a target model first" in window.last_error
    window.pick.use(str(target), "", "ngram", 3)
    assert host.loads[-1] == (str(target), "")
    host.worker.loaded.emit(ModelInfo(str(target), "", "target.gguf", None, n_ctx=4096))
    assert window.controls.drafter_kind == DrafterKind.NGRAM
    assert window.controls.chosen_depth == 3 and window.depth_control.requested == 3
    # A pick whose load failed does not choose the drafter of the next pair loaded.
    window.pick.use(str(target), str(draft), "draft", 5)
    host.loaded(draft=False)  # another pair (/models/target.gguf) came instead
    assert window.controls.drafter_kind == DrafterKind.NGRAM
    host.worker.loaded.emit(ModelInfo(str(target), str(draft), "target.gguf", "draft.gguf", n_ctx=4096))
    assert window.controls.drafter_kind == DrafterKind.NGRAM  # the one-shot choice was spent
    window.settings.last_target = str(target)
    window.loader.info = None
    dialog = window.dialogs.draft_finder()
    assert dialog is not None and dialog.target == str(target)
    dialog.close()


@pytest.fixture
def loaded_pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A target, the draft loaded with it kept in another folder (as the demo's ships inside a Python
    package: no library scan finds it), and another compatible draft the user names."""
    (tmp_path / "models").mkdir()
    (tmp_path / "package").mkdir()
    target, draft, other = (
        tmp_path / "models" / "target.gguf",
        tmp_path / "package" / "draft.gguf",
        tmp_path / "other.gguf",
    )
    shutil.copy(MODELS / "llama.gguf", target)
    shutil.copy(MODELS / "llama-q8.gguf", draft)
    shutil.copy(MODELS / "llama-q8.gguf", other)
    return target, draft, other


def labels_of(dialog: DraftFinderDialog) -> list[str]:
    return [table_cell(dialog.table, row, 0).text() for row in range(dialog.table.rowCount())]


def test_the_finder_measures_the_loaded_draft_and_use_this_keeps_it_and_undoes(qtbot, store, loaded_pair) -> None:
    """The window's finder lists and measures the loaded draft and the automatic drafter on it; "Use this" on
    a pick that needs no other file keeps the pair loaded, and Undo brings back the drafter, depth and Auto."""
    target, draft, other = loaded_pair
    window, host = window_with(qtbot, Settings(), store, loaded=False)
    host.worker.loaded.emit(ModelInfo(str(target), str(draft), "target.gguf", "draft.gguf", n_ctx=4096))
    window.controls.depth_slider.setValue(6)
    window.controls.auto_depth.setChecked(True)
    assert window.controls.drafter_kind == DrafterKind.COMPOSITE
    loads = list(host.loads)
    dialog = window.dialogs.draft_finder()
    assert dialog is not None and dialog.loaded_draft == str(draft)
    dialog.library, dialog.named = False, (str(other),)
    dialog.budget.setValue(60)
    dialog.start()
    qtbot.waitUntil(lambda: not dialog.running, timeout=300_000)
    advice = dialog.advice
    assert advice is not None and not advice.cancelled, dialog.status.text()
    labels = labels_of(dialog)
    assert {"draft.gguf (loaded)", "automatic: lookup + draft.gguf", "other.gguf", "n-gram lookup"} <= set(labels)
    for label in ("draft.gguf (loaded)", "automatic: lookup + draft.gguf"):
        row = labels.index(label)
        assert advice.results[row].prediction is not None, advice.results[row].reason  # measured like the others
        assert table_cell(dialog.table, row, COLUMNS.index("Predicted")).text().endswith("×")
    composite = advice.results[labels.index("automatic: lookup + draft.gguf")].candidate
    assert composite.drafter is DrafterKind.COMPOSITE and composite.path == str(draft)

    dialog.table.selectRow(labels.index("other.gguf"))  # another file replaces the loaded draft: the button says so
    assert dialog.use_button.text() == "Use this (unloads draft.gguf)"
    for label in ("draft.gguf (loaded)", "automatic: lookup + draft.gguf", "n-gram lookup"):
        dialog.table.selectRow(labels.index(label))
        assert dialog.use_button.text() == "Use this"
    ngram = advice.results[labels.index("n-gram lookup")]
    assert ngram.prediction is not None
    with qtbot.waitSignal(dialog.use_requested) as blocker:
        dialog.use_button.click()
    assert blocker.args == [str(target), str(draft), "ngram", ngram.prediction.best_depth]  # the draft stays
    assert host.loads == loads  # the loaded pair drafts with the pick: nothing reloaded, nothing unloaded
    assert window.controls.drafter_kind == DrafterKind.NGRAM
    assert window.controls.chosen_depth == ngram.prediction.best_depth
    assert window.pick.undo_button.isVisibleTo(window)
    window.pick.undo_button.click()
    assert host.loads == loads
    assert window.controls.drafter_kind == DrafterKind.COMPOSITE and window.controls.chosen_depth is None
    assert window.controls.depth_slider.value() == 6
    assert not window.pick.undo_button.isVisibleTo(window)


def test_undo_reloads_the_draft_a_pick_replaced(qtbot, store, loaded_pair) -> None:
    target, draft, other = loaded_pair
    window, host = window_with(qtbot, Settings(), store, loaded=False)
    before = ModelInfo(str(target), str(draft), "target.gguf", "draft.gguf", n_ctx=4096)
    host.worker.loaded.emit(before)
    window.pick.use(str(target), str(other), "draft", 5)
    assert host.loads[-1] == (str(target), str(other))
    host.worker.loaded.emit(ModelInfo(str(target), str(other), "target.gguf", "other.gguf", n_ctx=4096))
    assert window.controls.drafter_kind == DrafterKind.DRAFT_MODEL and window.controls.chosen_depth == 5
    window.pick.undo()
    assert host.loads[-1] == (str(target), str(draft))  # the replaced draft comes back
    assert window.controls.drafter_kind == DrafterKind.DRAFT_MODEL  # until it has loaded
    host.worker.loaded.emit(before)
    assert window.controls.drafter_kind == DrafterKind.COMPOSITE and window.controls.chosen_depth is None


def test_a_pick_holds_for_its_own_pair_only_and_is_not_saved(qtbot, store, loaded_pair, app_dirs) -> None:
    """Reloading the same pair keeps the finder's pick; another pair brings back the user's own drafter, depth
    and Auto; the settings file keeps the user's own, never the finder's."""
    target, draft, _ = loaded_pair
    window, host = window_with(qtbot, Settings(), store, loaded=False)
    pair = ModelInfo(str(target), str(draft), "target.gguf", "draft.gguf", n_ctx=4096)
    host.worker.loaded.emit(pair)
    window.pick.use(str(target), str(draft), "ngram", 3)
    window.save_settings()
    assert window.settings.drafter is DrafterKind.COMPOSITE and window.settings.depth is None
    window.loader.reload()
    host.worker.loaded.emit(pair)
    assert window.controls.drafter_kind == DrafterKind.NGRAM and window.controls.chosen_depth == 3
    host.loaded()  # another pair
    assert window.controls.drafter_kind == DrafterKind.COMPOSITE and window.controls.chosen_depth is None
    assert not window.pick.undo_button.isVisibleTo(window)
    # A pick the user changes by hand is theirs: it stays, and is saved.
    host.worker.loaded.emit(pair)
    window.pick.use(str(target), str(draft), "ngram", 3)
    window.controls.depth_slider.setValue(2)
    window.save_settings()
    assert window.settings.drafter is DrafterKind.NGRAM and window.settings.depth == 2
    host.loaded()
    assert window.controls.drafter_kind == DrafterKind.NGRAM and window.controls.chosen_depth == 2


def test_the_finder_says_plain_decoding_wins_when_the_best_prediction_measured_slower(qtbot) -> None:
    finder = DraftFinderDialog("target.gguf")
    qtbot.addWidget(finder)
    finder.show_advice(advice_measured_at(0.87))
    assert "None of the candidates beats plain decoding" in finder.status.text()
    assert "predicted 1.29× but measured 0.87×" in finder.status.text()


@pytest.mark.slow
def test_the_finder_opened_from_the_picker_measures_the_pairs_draft_as_the_file_menus_does(
    qtbot, settings, store, demo_pair, tmp_path: Path
) -> None:
    """The picker's "Find the best draft…" lists the draft loaded with the target (the demo's ships inside a
    Python package, where no library scan finds it) and the automatic drafter on it, as File → Find the best
    draft… does; a draft chosen in the picker instead is the one it measures."""
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.models_loaded, timeout=120_000):
        window.load_models(demo_pair.target, demo_pair.draft)
    from_menu = window.dialogs.draft_finder()
    assert from_menu is not None
    from_menu.close()
    picker = window.dialogs.model_picker()
    assert picker.draft_field.path == str(demo_pair.draft)  # the loaded pair, as the picker opens on it
    picker.finder_button.click()
    (finder,) = picker.findChildren(DraftFinderDialog)
    assert (
        (finder.target, finder.loaded_draft, finder.composite)
        == (from_menu.target, from_menu.loaded_draft, from_menu.composite)
        == (str(demo_pair.target), str(demo_pair.draft), True)
    )
    finder.library = False  # this machine's folders would add files, never the package's draft
    finder.start()
    qtbot.waitUntil(lambda: "loading" in finder.status.text() or not finder.running, timeout=120_000)
    finder.cancel()  # every candidate is listed before the first is measured
    qtbot.waitUntil(lambda: not finder.running, timeout=120_000)
    assert finder.advice is not None and finder.advice.cancelled, finder.status.text()
    labels = labels_of(finder)
    assert {f"{demo_pair.draft.name} (loaded)", f"automatic: lookup + {demo_pair.draft.name}"} <= set(labels)
    loaded = finder.advice.results[labels.index(f"{demo_pair.draft.name} (loaded)")].candidate
    assert loaded.kind is CandidateKind.DRAFT and loaded.path == str(demo_pair.draft)
    finder.close()

    chosen = tmp_path / "chosen.gguf"
    shutil.copy(demo_pair.draft, chosen)
    picker.draft_field.edit.setText(str(chosen))
    picker.finder_button.click()
    (again,) = [d for d in picker.findChildren(DraftFinderDialog) if d is not finder]
    assert again.loaded_draft == str(chosen)
    again.close()
    picker.close()
