"""The draft finder dialog offscreen, on real small models: progress, cancel, the table, "Use this"."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from specchat.core.advise import cache
from specchat.core.settings import Settings
from specchat.core.types import DrafterKind
from specchat.ui.draft_finder import COLUMNS, DraftFinderDialog
from specchat.ui.main_window import MainWindow
from specchat.ui.model_picker import ModelPickerDialog
from specchat.ui.worker import ModelInfo
from support.fake_host import FakeHost

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
    labels = [dialog.table.item(row, 0).text() for row in range(dialog.table.rowCount())]
    assert labels == [r.candidate.label for r in advice.results]
    assert set(labels) >= {"draft.gguf", "n-gram lookup"}
    row = labels.index("draft.gguf")
    result = advice.results[row]
    assert result.prediction is not None
    assert dialog.table.item(row, 4).text() == str(result.prediction.best_depth)
    assert dialog.table.item(row, COLUMNS.index("Why")).text() == result.reason
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
    assert "measured here" not in picker.verdict.text()
    assert picker.finder_button.isEnabled()
    cache.store([cache.CachedResult(str(target), "draft", str(draft), 5, 1.4, 1.3, 1.38, 0.8, 1.0)])
    picker.draft_field.edit.setText(str(draft) + " ")  # any edit refreshes the verdict line
    assert picker.verdict.text().endswith(" · measured here: 1.38x at depth 5")
    st = draft.stat()
    os.utime(draft, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    picker.draft_field.edit.setText(str(draft))
    assert "measured here" not in picker.verdict.text()  # the draft changed since

    dialog = picker.open_draft_finder()
    assert dialog.target == str(target)
    with qtbot.waitSignal(picker.advice_chosen) as blocker:
        dialog.use_requested.emit(str(target), str(draft), "draft", 3)
    assert blocker.args == [str(target), str(draft), "draft", 3]
    dialog.close()


def test_the_window_loads_the_pick_with_its_depth_and_drafter(qtbot, store, pair) -> None:
    target, draft = pair
    host = FakeHost()
    window = MainWindow(Settings(), store, host=host)
    qtbot.addWidget(window)
    assert window.open_draft_finder() is None  # no target yet: an error line instead
    assert "choose a target model first" in window.last_error
    window.use_advice(str(target), "", "ngram", 3)
    assert host.loads[-1] == (str(target), "")
    assert window.controls.chosen_depth == 3 and window.depth_control.requested == 3
    host.worker.loaded.emit(ModelInfo(str(target), "", "target.gguf", None, n_ctx=4096))
    assert window.controls.drafter_kind is DrafterKind.NGRAM
    # A pick whose load failed does not choose the drafter of the next pair loaded.
    window.use_advice(str(target), str(draft), "draft", 5)
    host.loaded(draft=False)  # another pair (/models/target.gguf) came instead
    assert window.controls.drafter_kind is DrafterKind.NGRAM
    host.worker.loaded.emit(ModelInfo(str(target), str(draft), "target.gguf", "draft.gguf", n_ctx=4096))
    assert window.controls.drafter_kind is DrafterKind.NGRAM  # the one-shot choice was spent
    window.settings.last_target = str(target)
    window.model_info = None
    dialog = window.open_draft_finder()
    assert dialog is not None and dialog.target == str(target)
    dialog.close()
