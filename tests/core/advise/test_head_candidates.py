"""Heads in the draft finder: found beside the target, judged, listed with one line when this build cannot
measure them; catalog heads for the target's family; the backend verdict from the same calibration."""

from __future__ import annotations

import shutil
from pathlib import Path

from specchat.core.advise import payoff
from specchat.core.advise.advisor import advise, depth_for
from specchat.core.advise.candidates import (
    Candidate,
    CandidateKind,
    family,
    find_candidates,
    head_drafter_kind,
    unmeasurable_reason,
)
from specchat.core.models.catalog import load_heads, parse_heads
from support.heads import write_head

MODELS = Path(__file__).resolve().parents[2] / "models"


def folder_with_heads(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    target = folder / "target-Q4_K_M.gguf"
    shutil.copy(MODELS / "llama.gguf", target)
    write_head(folder / "eagle3-target-Q8_0.gguf", target, "eagle3")
    write_head(folder / "dflash-target-Q8_0.gguf", target, "dflash", block=6)
    write_head(folder / "dspark-target-Q8_0.gguf", target, "dspark", layers=[1, 99])  # trained for a deeper model
    return target


def test_heads_beside_the_target_are_candidates_with_their_kind_and_reason(tmp_path: Path) -> None:
    target = folder_with_heads(tmp_path)
    found = find_candidates(target, library=False, lookup=False, catalog=False)
    heads = {c.head: c for c in found.candidates if c.head}
    assert set(heads) == {"eagle3", "dflash", "dspark"}
    eagle, dflash, dspark = heads["eagle3"], heads["dflash"], heads["dspark"]
    assert eagle.kind is CandidateKind.HEAD and eagle.label == "EAGLE-3 head for Test Llama"
    assert eagle.source == "beside the target" and eagle.memory_bytes > 0
    assert dflash.kind is CandidateKind.HEAD and dflash.natural_depth == 5  # block 6 less the anchor slot
    assert depth_for(dflash, 8) == 5 and depth_for(eagle, 8) == 8  # its own block is the deepest calibrated
    assert dspark.kind is CandidateKind.INCOMPATIBLE
    assert dspark.reason.startswith("incompatible: it reads target layer 99, but the target has")
    for head in (eagle, dflash):  # measurable exactly when the engine has a drafter of that kind
        if head_drafter_kind(head.head) is None:
            assert not head.measurable and head.reason == unmeasurable_reason(head.head)
            assert head.reason.startswith(f"this build has no {'EAGLE-3' if head.head == 'eagle3' else 'DFlash'}")
        else:
            assert head.measurable and head.reason == ""
    assert eagle.to_json()["head"] == "eagle3"


def test_the_advisor_lists_the_heads_and_says_whether_speculation_can_pay_here(tmp_path: Path) -> None:
    target = folder_with_heads(tmp_path)
    advice = advise(target, budget_seconds=30, library=False, catalog=False, max_tokens=16, max_depth=4)
    by_head = {r.candidate.head: r for r in advice.results if r.candidate.head}
    eagle = by_head["eagle3"]
    if head_drafter_kind("eagle3") is None:
        assert eagle.prediction is None and eagle.reason == unmeasurable_reason("eagle3")
    else:  # a build with the drafter: measured, or one line on why it could not run
        assert eagle.prediction is not None or eagle.reason.startswith("could not run: ")
    assert by_head["dspark"].reason.startswith("incompatible: ")
    assert advice.payoff is not None  # from the same rounds: plain decoding and the lookup's batches
    assert advice.payoff.batch_ratio >= 1.0 and advice.payoff.line().startswith("Speculation ")
    backend = advice.to_json()["backend"]
    assert isinstance(backend, dict) and backend["outlook"] == advice.payoff.outlook.value
    assert payoff.known(target) == advice.payoff  # kept for the picker


def test_catalog_heads_parse_and_are_offered_to_their_own_family_and_size() -> None:
    heads = load_heads()
    assert {h.kind for h in heads} >= {"eagle3", "dflash", "dspark"}
    assert all(h.checked for h in heads)  # every entry says where its name was seen
    assert all(h.file.endswith(".gguf") for h in heads if h.format == "gguf")
    assert family("Llama-3.1-8B").removeprefix("meta") == family("Meta-Llama-3.1-8B-Instruct").removeprefix("meta")
    bad = '{"heads": [{"id": "x", "kind": "medusa", "label": "l", "target_family": "f", "repo": "r/r"}]}'
    try:
        parse_heads(bad)
    except Exception as exc:  # noqa: BLE001 - the type is asserted below
        assert type(exc).__name__ == "SpecchatError" and "catalog head x is malformed" in str(exc)
    else:
        raise AssertionError("a head of an unknown kind was accepted")


def test_catalog_heads_reach_the_finder_for_a_matching_target(tmp_path: Path, make_gguf) -> None:
    target = make_gguf(
        "Qwen3-8B-Q4_K_M.gguf",
        basename="Qwen3",
        size_label="8B",
        model_kv={"{arch}.block_count": 4, "{arch}.embedding_length": 64, "{arch}.attention.head_count": 4},
    )
    found = find_candidates(target, library=False, lookup=False)
    offered = [c for c in found.candidates if c.kind is CandidateKind.CATALOG and c.head]
    assert [c.label for c in offered] == ["DFlash head for Qwen3 8B"]
    assert "convert_hf_to_gguf.py --target-model-dir" in offered[0].reason and offered[0].drafter is None
    other = make_gguf(
        "Qwen3-4B-Q4_K_M.gguf",
        basename="Qwen3",
        size_label="4B",
        model_kv={"{arch}.block_count": 4, "{arch}.embedding_length": 64, "{arch}.attention.head_count": 4},
    )
    assert [
        c.label
        for c in find_candidates(other, library=False, lookup=False).candidates
        if c.kind is CandidateKind.CATALOG and c.head
    ] == ["DFlash head for Qwen3 4B"]


def test_an_mtp_sidecar_is_never_measurable_here() -> None:
    c = Candidate(CandidateKind.HEAD, "MTP layers for X", "/x/mtp-x.gguf", head="mtp")
    assert c.drafter is None and not c.measurable
    assert "inside the target's file" in unmeasurable_reason("mtp")
