"""The window's drafter list when the draft file turns out to be a head: "Draft model" chosen means the head's own
drafter there (``registry.resolve``), not the automatic fallback a drafter the pair lacks gets."""

from __future__ import annotations

import pytest
from pytestqt.qtbot import QtBot

from specchat.core.engine.registry import Part, head_drafter_name, head_part
from specchat.core.head_formats import head_formats
from specchat.core.settings import Settings
from specchat.core.types import DrafterKind
from specchat.ui.controls import SpeculationControls

DRIVEN = [(f.kind, name) for f in head_formats() if (name := head_drafter_name(f.kind)) is not None]


@pytest.mark.parametrize(("head_kind", "drafter"), DRIVEN)
def test_draft_model_chosen_then_a_head_loaded_selects_the_heads_drafter(
    qtbot: QtBot, settings: Settings, head_kind: str, drafter: str
) -> None:
    controls = SpeculationControls(settings)
    qtbot.addWidget(controls)
    controls.set_offered({Part.DRAFT_MODEL.value})
    controls.drafter.setCurrentIndex(controls.drafter.findData(DrafterKind.DRAFT_MODEL))
    assert controls.drafter_kind == DrafterKind.DRAFT_MODEL
    controls.set_offered({head_part(head_kind)})  # --draft now names a head file
    assert controls.drafter_kind == drafter
    controls.set_offered({Part.MTP_HEADS.value})  # neither: the registry's default, as for any missing part
    assert controls.drafter_kind == DrafterKind.COMPOSITE
