"""Heads and the backend verdict in the model picker and the draft finder (real widgets, offscreen)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from specchat.core.advise import payoff
from specchat.core.advise.advisor import Advice, CandidateResult
from specchat.core.advise.calibrate import RoundSample
from specchat.core.advise.candidates import Candidate, CandidateKind
from specchat.ui.draft_finder import DraftFinderDialog, row_texts
from specchat.ui.model_picker import ModelPickerDialog
from support.gguf_files import GgufMaker
from support.heads import dflash, target, write_head
from support.hubserver import FakeHub
from support.picker import catalog_pair_selected, verdict_in

MODELS = Path(__file__).resolve().parents[1] / "models"


def metal_like(batch_of_8: float = 6.5) -> payoff.Payoff:
    """The verdict of a calibration whose 8-token verify costs ``batch_of_8`` one-token passes."""
    slope = (batch_of_8 - 1) / 7
    rounds = [RoundSample(d, d, 0, 0.01 * (1 + d * slope)) for d in range(0, 9)]
    scaling = payoff.verify_scaling(rounds)
    assert scaling is not None
    return payoff.payoff(scaling)


@pytest.fixture
def target_with_heads(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    target = folder / "target-Q4_K_M.gguf"
    shutil.copy(MODELS / "llama.gguf", target)
    write_head(folder / "eagle3-target-Q8_0.gguf", target, "eagle3")
    write_head(folder / "dflash-target-Q8_0.gguf", target, "dflash", layers=[1, 99])  # for a deeper model
    return target


def test_the_picker_offers_the_heads_beside_the_target_and_uses_one_as_the_draft(
    qtbot: QtBot, target_with_heads: Path, tmp_path: Path
) -> None:
    dialog = ModelPickerDialog(str(target_with_heads), "")
    qtbot.addWidget(dialog)
    dialog.show()
    verdict_in(qtbot, dialog)
    assert dialog.heads_row.isVisible()
    items = [dialog.heads_box.itemText(i) for i in range(dialog.heads_box.count())]
    assert items == [
        "✗ DFlash head for Test Llama does not fit this target: it reads target layer 99, but the target has "
        "2 layers (trained for a deeper model) (dflash-target-Q8_0.gguf)",
        "✓ EAGLE-3 head for Test Llama: fits this target (eagle3-target-Q8_0.gguf)",
    ]
    dialog.heads_box.setCurrentIndex(1)
    qtbot.mouseClick(dialog.use_head_button, Qt.MouseButton.LeftButton)
    assert Path(dialog.draft_field.path).name == "eagle3-target-Q8_0.gguf"
    assert verdict_in(qtbot, dialog) == "✓ EAGLE-3 head for Test Llama: fits this target"
    assert not dialog.backend.isVisible()  # nothing calibrated yet

    alone = tmp_path / "alone" / "llama.gguf"  # tests/models holds head fixtures beside llama.gguf
    alone.parent.mkdir()
    shutil.copy(MODELS / "llama.gguf", alone)
    dialog.target_field.edit.setText(str(alone))  # a target with no heads beside it
    verdict_in(qtbot, dialog)
    assert not dialog.heads_row.isVisible() and dialog.heads_box.count() == 0


def test_the_picker_says_speculation_cannot_pay_on_this_backend(qtbot: QtBot, target_with_heads: Path) -> None:
    payoff.remember(target_with_heads, metal_like(6.5))
    dialog = ModelPickerDialog(str(target_with_heads), "")
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.backend.isVisible()
    assert dialog.backend.text().startswith(
        "Speculation cannot pay on this backend: a batch of 8 tokens costs 6.5x one token here"
    )
    assert "font-weight: bold" in dialog.backend.styleSheet()
    payoff.remember(target_with_heads, metal_like(2.4))
    dialog.target_field.edit.setText(str(target_with_heads) + " ")  # asks again, as a keystroke does
    assert dialog.backend.text().startswith("Speculation can pay on this backend: a batch of 8 tokens costs 2.4x")
    assert dialog.backend.styleSheet() == ""


def test_the_finder_names_the_heads_and_the_backend_verdict(qtbot: QtBot, target_with_heads: Path) -> None:
    payoff.remember(target_with_heads, metal_like(6.5))
    dialog = DraftFinderDialog(str(target_with_heads))
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.heads_note.isVisible()
    assert dialog.heads_note.text() == (
        "Heads beside it (candidates in the table): dflash-target-Q8_0.gguf (DFlash), eagle3-target-Q8_0.gguf (EAGLE-3)"
    )
    assert dialog.backend.isVisible() and "costs 6.5x one token" in dialog.backend.text()

    head = Candidate(
        CandidateKind.HEAD,
        "EAGLE-3 head for Test Llama",
        str(target_with_heads),
        head="eagle3",
        reason="this build has no EAGLE-3 drafter, so the EAGLE-3 head cannot be measured here",
    )
    advice = Advice(str(target_with_heads), [CandidateResult(head, reason=head.reason)], payoff=metal_like(6.8))
    dialog.show_advice(advice)
    kind_cell, reason_cell = dialog.table.item(0, 1), dialog.table.item(0, 9)
    assert kind_cell is not None and reason_cell is not None
    assert kind_cell.text() == "EAGLE-3 head"
    assert reason_cell.text() == head.reason
    assert dialog.status.text().endswith(metal_like(6.8).line())
    assert "plain decoding is the fastest here. Speculation cannot pay" in dialog.status.text()
    assert "6.8x" in dialog.backend.text()  # the fresh calibration replaces the remembered one
    assert row_texts(CandidateResult(Candidate(CandidateKind.CATALOG, "x", head="dflash")))[1] == "catalog dflash"


FAKE_CATALOG = """{"pairs": [
  {"id": "tiny", "name": "Tiny 1B + 100M", "memory_gb": 1, "license": "apache-2.0", "good_for": "tests",
   "target": {"repo": "fake/Tiny-1B-GGUF", "quant": "Q4_K_M", "size_gb": 0.001},
   "draft": {"repo": "fake/Tiny-100M-GGUF", "quant": "Q8_0", "size_gb": 0.001}}
]}"""


@pytest.mark.parametrize("ticked", [False, True])
def test_a_catalog_download_offers_the_targets_sidecars_and_fetches_them_when_ticked(
    qtbot: QtBot, hub: FakeHub, make_gguf: GgufMaker, monkeypatch: pytest.MonkeyPatch, ticked: bool
) -> None:
    from specchat.core.models import catalog
    from specchat.ui import model_sources

    hub.add("fake/Tiny-1B-GGUF", "Tiny-1B-Q4_K_M.gguf", target(make_gguf, "t.gguf").read_bytes())
    hub.add("fake/Tiny-1B-GGUF", "dflash-Tiny-1B-Q8_0.gguf", dflash(make_gguf).read_bytes())
    hub.add("fake/Tiny-100M-GGUF", "Tiny-100M-Q8_0.gguf", make_gguf("d.gguf", basename="Tiny").read_bytes())
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setattr(model_sources, "load_catalog", lambda: catalog.parse_catalog(FAKE_CATALOG))
    dialog, item = catalog_pair_selected(qtbot, "tiny")
    tab = dialog.catalog_tab
    assert tab is not None
    tab.sidecars_box.setChecked(ticked)
    with qtbot.waitSignal(tab.pair_downloaded, timeout=60_000):
        qtbot.mouseClick(tab.get_button, Qt.MouseButton.LeftButton)
    status = tab.status.text()
    verdict_in(qtbot, dialog)
    if ticked:
        assert status.endswith("; with dflash sidecar dflash-Tiny-1B-Q8_0.gguf"), status
        assert hub.gets("dflash-Tiny-1B-Q8_0.gguf")
        assert dialog.form.isRowVisible(dialog.heads_row)
        assert dialog.heads_box.itemText(0) == (
            "✓ DFlash head for LLaMA3.1 8B Instruct: fits this target (dflash-Tiny-1B-Q8_0.gguf)"
        )
    else:
        assert status.endswith(
            '; its repository also holds a dflash sidecar (dflash-Tiny-1B-Q8_0.gguf): tick "with sidecars" to fetch it'
        ), status
        assert not hub.gets("dflash-Tiny-1B-Q8_0.gguf")


def test_a_heads_finder_result_shows_beside_the_pair(target_with_heads: Path) -> None:
    import time

    from specchat.core.advise import cache
    from specchat.ui.model_sources import measured_text

    head = target_with_heads.parent / "eagle3-target-Q8_0.gguf"
    assert measured_text(str(target_with_heads), str(head)) == ""
    cache.store([cache.CachedResult(str(target_with_heads), "eagle3", str(head), 3, 1.4, 1.3, None, 0.7, time.time())])
    assert measured_text(str(target_with_heads), str(head)) == "predicted here: 1.40x at depth 3"
