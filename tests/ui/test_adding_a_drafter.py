"""A drafter is its module, its registry entry and its tests; a head file format is one entry in the table of
head formats. Each is added here in that one place, at test time, and seen reaching the terminal's choices,
the window's drafter list, the server's ``speculative.drafter``, the draft finder's candidates and the model
picker (real widgets offscreen, real GGUF headers, the real parsers)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from specchat.__main__ import build_parser
from specchat.cli.chat import drafter_from_args
from specchat.core import head_formats
from specchat.core.advise.candidates import CandidateKind, find_candidates
from specchat.core.engine import registry
from specchat.core.engine.drafters import Draft, Drafter, DraftRequest
from specchat.core.engine.registry import DrafterEntry, head_part
from specchat.core.engine.sampling import Distribution
from specchat.core.head_formats import CHAINED, HeadFormat
from specchat.core.models.ggufmeta import read_gguf_info
from specchat.core.models.shape import read_model_shape
from specchat.core.types import DrafterKind, DraftSource
from specchat.server.protocol import Defaults, parse_chat
from specchat.ui.controls import SpeculationControls
from specchat.ui.model_picker import ModelPickerDialog
from support.gguf_files import write_gguf
from support.picker import verdict_in
from support.qt_items import combo_row

MODELS = Path(__file__).resolve().parents[1] / "models"


class RepeatDrafter(Drafter):
    """Proposes the last committed token again, k times: a lookup-style drafter that needs nothing."""

    kind = "repeat"
    source = DraftSource("repeat")

    def draft(self, request: DraftRequest) -> Draft:
        last = int(request.tokens[-1])
        return Draft(tokens=[last] * request.k, q=[Distribution.one_hot(last)] * request.k, probs=[1.0] * request.k)


REPEAT = DrafterEntry("repeat", "Repeat (the last token again)", lambda parts: RepeatDrafter(), samples=False)
MEDUSA = HeadFormat(
    "medusa", "Medusa head", "medusa", "medusa-", drafter=DrafterKind.EAGLE3, context=CHAINED, target_layers=3
)
"""A made-up head format, driven by an existing drafter (as a new file format of a known kind of head is)."""


@pytest.fixture
def added(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """One line in the registry, one in the table of head formats: nothing else changes."""
    monkeypatch.setattr(registry, "DRAFTERS", (*registry.DRAFTERS, REPEAT))
    monkeypatch.setattr(head_formats, "HEAD_FORMATS", (*head_formats.HEAD_FORMATS, MEDUSA))
    yield


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """A real small target with a Medusa head file beside it, named as llama-server -hf would find it."""
    folder = tmp_path / "models"
    folder.mkdir()
    target = folder / "target-Q4_K_M.gguf"
    shutil.copy(MODELS / "llama.gguf", target)
    info, shape = read_gguf_info(target, with_vocab=True), read_model_shape(target)
    assert info.vocab is not None
    kv: dict[str, int | bool | str | list[int]] = {
        "{arch}.block_count": 1,
        "{arch}.attention.head_count": shape.n_head,
        "{arch}.embedding_length": shape.n_embd,
        "{arch}.target_layers": [0, shape.n_layers // 2, shape.n_layers - 1],
        "{arch}.target_hidden_size": shape.n_embd,
        "general.base_model.0.name": "Test Llama",
    }
    write_gguf(
        folder / "medusa-target-Q8_0.gguf",
        arch="medusa",
        tokens=info.vocab.tokens,
        token_types=info.vocab.types,
        tokenizer_model=info.tokenizer_model or "gpt2",
        bos=info.bos_id,
        eos=info.eos_id,
        eot=info.eot_id,
        add_bos=info.add_bos,
        model_kv=kv,
    )
    return target


def test_a_new_drafter_reaches_the_terminal_the_server_and_the_finder(added: None, target: Path) -> None:
    args = build_parser().parse_args(["chat", "--target", "t.gguf", "--drafter", "repeat", "hello"])
    assert drafter_from_args(args) == "repeat"
    request = parse_chat(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "speculative": {"drafter": "repeat"}},
        Defaults(max_tokens_limit=64),
    )
    assert request.spec.drafter == "repeat"
    found = find_candidates(target, library=False, catalog=False)
    mine = [c for c in found.candidates if c.kind is CandidateKind.DRAFTER]
    assert [(c.label, c.drafter, c.measurable) for c in mine] == [("Repeat (the last token again)", "repeat", True)]


def test_a_new_head_format_reaches_the_terminal_the_finder_and_the_picker(
    added: None, target: Path, qtbot: QtBot
) -> None:
    args = build_parser().parse_args(["models", "download", "acme/Target-GGUF", "--sidecar", "medusa"])
    assert args.sidecar == ["medusa"]
    found = find_candidates(target, library=False, catalog=False)
    heads = [c for c in found.candidates if c.head == "medusa"]
    assert [(c.kind, c.label, c.drafter, c.reason) for c in heads] == [
        (CandidateKind.HEAD, "Medusa head for Test Llama", DrafterKind.EAGLE3, "")
    ]  # measurable by its drafter

    dialog = ModelPickerDialog(str(target), "")
    qtbot.addWidget(dialog)
    verdict_in(qtbot, dialog)
    assert [dialog.heads_box.itemText(i) for i in range(dialog.heads_box.count())] == [
        "✓ Medusa head for Test Llama: fits this target (medusa-target-Q8_0.gguf)"
    ]


def test_both_reach_the_windows_drafter_list(added: None, qtbot: QtBot, settings) -> None:
    controls = SpeculationControls(settings)
    qtbot.addWidget(controls)
    row = controls.drafter.findData("repeat")
    assert row >= 0 and controls.drafter.itemText(row) == "Repeat (the last token again)"
    controls.set_offered({head_part("medusa")})  # a Medusa head loaded with --draft
    combo = controls.drafter
    enabled = {controls.drafter.itemData(r) for r in range(controls.drafter.count()) if combo_row(combo, r).isEnabled()}
    assert {DrafterKind.EAGLE3, DrafterKind.COMPOSITE, "repeat"} <= enabled
    assert DrafterKind.DSPARK not in enabled and DrafterKind.DRAFT_MODEL not in enabled
    composite = controls.drafter.findData(DrafterKind.COMPOSITE)
    assert controls.drafter.itemText(composite) == "Automatic (lookup + Medusa head)"
