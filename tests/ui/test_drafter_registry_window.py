"""The window's drafter list and its fallback read the drafter registry: a new entry shows up by itself."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from specchat.core.engine import registry
from specchat.core.engine.drafters import NgramDrafter
from specchat.core.engine.registry import DrafterEntry, Part, head_part
from specchat.core.types import DrafterKind
from specchat.ui.controls import SpeculationControls
from support.fake_host import window_with
from support.qt_items import combo_row

ECHO = DrafterEntry("echo", "Echo ({model})", lambda parts: NgramDrafter(), needs=(Part.MTP_HEADS.value,))


@pytest.fixture
def with_echo(monkeypatch: pytest.MonkeyPatch) -> Iterator[DrafterEntry]:
    monkeypatch.setattr(registry, "DRAFTERS", (*registry.DRAFTERS, ECHO))
    yield ECHO


def test_a_new_entry_is_listed_labelled_and_greyed_out_by_what_it_needs(qtbot, settings, with_echo) -> None:
    settings.drafter = "echo"
    controls = SpeculationControls(settings)
    qtbot.addWidget(controls)
    row = controls.drafter.findData("echo")
    assert row == controls.drafter.count() - 1 and controls.drafter_kind == "echo"
    assert controls.drafter.itemText(row) == "Echo (MTP heads)"
    controls.set_offered({Part.DRAFT_MODEL.value})  # no heads: greyed out, the pair's default instead
    assert not combo_row(controls.drafter, row).isEnabled()
    assert controls.drafter_kind is DrafterKind.COMPOSITE
    controls.set_offered({Part.MTP_HEADS.value})
    assert combo_row(controls.drafter, row).isEnabled()


def test_a_drafter_the_pair_lacks_gives_way_to_the_registrys_default_and_says_so(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store, loaded=False)
    host.loaded(draft=False)  # the target alone: lookup or nothing
    assert window.controls.drafter_kind is DrafterKind.NGRAM
    window.controls.drafter.setCurrentIndex(window.controls.drafter.findData(DrafterKind.MTP))  # greyed, forced
    said: list[str] = []
    window.chat.status.connect(said.append)
    window.send("Hello")
    assert host.requests[-1].drafter is DrafterKind.NGRAM
    assert said == ["The loaded pair has no MTP heads: drafting with N-gram (prompt lookup)"]


def test_a_loaded_head_offers_its_own_drafter_and_automatic_on_it(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store, loaded=False)
    settings_before = window.controls.drafter_kind
    host.loaded(draft=True, parts=frozenset({head_part("eagle3")}))  # --draft eagle3-….gguf: a head, no model
    combo = window.controls.drafter
    enabled = {
        window.controls.drafter.itemData(row)
        for row in range(window.controls.drafter.count())
        if combo_row(combo, row).isEnabled()
    }
    offered = {head_part("eagle3")}
    assert enabled == {e.name for e in registry.DRAFTERS if not e.parts or set(e.parts) & offered}
    assert DrafterKind.EAGLE3 in enabled and DrafterKind.DRAFT_MODEL not in enabled
    composite = window.controls.drafter.findData(DrafterKind.COMPOSITE)
    assert window.controls.drafter.itemText(composite) == "Automatic (lookup + EAGLE-3 head)"
    assert settings_before is DrafterKind.COMPOSITE and window.controls.drafter_kind is DrafterKind.COMPOSITE
    window.controls.drafter.setCurrentIndex(window.controls.drafter.findData(DrafterKind.EAGLE3))
    said: list[str] = []
    window.chat.status.connect(said.append)
    window.send("Hello")
    assert host.requests[-1].drafter == DrafterKind.EAGLE3 and said == []  # the head's drafter, not a fallback
