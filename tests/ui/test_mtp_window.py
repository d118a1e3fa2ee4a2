"""The window with a target that carries MTP heads: automatic drafting (lookup + the heads) is preselected."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.core.types import DrafterKind
from specchat.ui.main_window import MainWindow
from support.qt_items import combo_row

MTP_MODEL = Path(__file__).resolve().parents[1] / "models" / "qwen35-mtp.gguf"
PROMPT = "Name a fruit."


@pytest.mark.slow
def test_the_window_preselects_automatic_drafting_with_the_heads_and_drafts_with_them(qtbot, settings, store) -> None:
    settings.depth, settings.repeat_penalty, settings.max_tokens = 3, 1.3, 24
    settings.drafter = DrafterKind.DRAFT_MODEL  # saved from an earlier pair: this one has no draft model
    window = MainWindow(settings, store)
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.models_loaded, timeout=120_000):
        window.load_models(MTP_MODEL)
    controls = window.controls
    assert controls.drafter_kind is DrafterKind.COMPOSITE and "MTP heads" in window.panel.model_label.text()
    assert controls.drafter.currentText() == "Automatic (lookup + MTP heads)" == controls.drafter.toolTip()
    draft_row = controls.drafter.findData(DrafterKind.DRAFT_MODEL)
    assert not combo_row(controls.drafter, draft_row).isEnabled()  # no draft model loaded
    with qtbot.waitSignal(window.reply_finished, timeout=120_000) as blocker:
        window.send(PROMPT)
    stats = blocker.args[0].stats
    assert stats.generated > 0 and set(stats.by_source) <= {"mtp", "lookup"}
    controls.drafter.setCurrentIndex(controls.drafter.findData(DrafterKind.MTP))  # the heads alone stay a choice
    with qtbot.waitSignal(window.reply_finished, timeout=120_000) as blocker:
        window.send(PROMPT)
    assert blocker.args[0].stats.generated > 0
    window.close()
