"""A drafter the loaded pair cannot run is greyed out and says what would enable it; "with sidecars" explains."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip
from pytestqt.qtbot import QtBot

from specchat.core.engine.registry import Part
from specchat.core.settings import Settings
from specchat.core.types import DrafterKind
from specchat.ui.controls import SpeculationControls
from support.qt_items import combo_row


def _hints(controls: SpeculationControls) -> dict[str, tuple[bool, str]]:
    return {
        str(controls.drafter.itemData(row)): (
            combo_row(controls.drafter, row).isEnabled(),
            combo_row(controls.drafter, row).toolTip(),
        )
        for row in range(controls.drafter.count())
    }


def test_greyed_out_drafters_say_what_would_enable_them(qtbot: QtBot, settings: Settings) -> None:
    controls = SpeculationControls(settings)
    qtbot.addWidget(controls)
    controls.set_offered({Part.DRAFT_MODEL.value})  # a target and a draft model: no heads
    hints = _hints(controls)
    assert hints[DrafterKind.MTP] == (
        False,
        "Not available with this pair: needs a target with its own MTP heads "
        '(the picker\'s Recommended tab marks them "own MTP heads"): load one as the target',
    )
    assert hints[DrafterKind.EAGLE3] == (
        False,
        "Not available with this pair: load an EAGLE-3 head made for this target as the draft (File → Choose models…)",
    )
    assert hints[DrafterKind.DFLASH][1].startswith("Not available with this pair: load a DFlash head or a DFlash2 head")
    assert hints[DrafterKind.DSPARK][1].startswith("Not available with this pair: load a DSpark head made for this")
    for usable in (DrafterKind.COMPOSITE, DrafterKind.DRAFT_MODEL, DrafterKind.NGRAM, DrafterKind.NONE):
        assert hints[usable] == (True, ""), usable  # nothing to explain on an entry that works

    controls.set_offered(set())  # the target alone: the draft-model entries say how to get one
    hints = _hints(controls)
    assert hints[DrafterKind.DRAFT_MODEL] == (
        False,
        "Not available with this pair: load a draft model beside the target (File → Choose models…)",
    )
    assert "or a target with its own MTP heads" in hints[DrafterKind.COMPOSITE][1]
    controls.set_offered({Part.MTP_HEADS.value})  # hints go when the part comes
    assert _hints(controls)[DrafterKind.MTP] == (True, "")


def test_the_open_list_shows_the_hint_over_a_greyed_out_entry(qtbot: QtBot, settings: Settings) -> None:
    controls = SpeculationControls(settings)
    qtbot.addWidget(controls)
    controls.show()
    controls.set_offered({Part.DRAFT_MODEL.value})
    controls.drafter.showPopup()
    view = controls.drafter.view()
    index = view.model().index(controls.drafter.findData(DrafterKind.EAGLE3), 0)
    qtbot.waitUntil(lambda: view.isVisible() and view.visualRect(index).height() > 0)
    spot = view.visualRect(index).center()
    event = QHelpEvent(QEvent.Type.ToolTip, spot, view.viewport().mapToGlobal(spot))
    QApplication.sendEvent(view.viewport(), event)
    qtbot.waitUntil(lambda: QToolTip.isVisible())
    assert QToolTip.text().startswith("Not available with this pair: load an EAGLE-3 head")
    assert index.data(Qt.ItemDataRole.ToolTipRole) == QToolTip.text()
    controls.drafter.hidePopup()
    QToolTip.showText(QPoint(0, 0), "")


def test_with_sidecars_explains_itself(qtbot: QtBot) -> None:
    from specchat.ui.model_picker import ModelPickerDialog

    dialog = ModelPickerDialog()
    qtbot.addWidget(dialog)
    tab = dialog.catalog_tab
    assert tab is not None
    box = tab.sidecars_box
    assert box.text() == "with sidecars (drafter heads)"
    tip = box.toolTip()
    assert tip.startswith("Sidecars are small drafter files published beside a model in its repository")
    assert "eagle3-" in tip and "Most repositories have none." in tip and box.whatsThis() == tip
