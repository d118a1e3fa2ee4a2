"""Finding candidates: compatible files, incompatible ones with the reason, MTP heads, n-gram, catalog drafts."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.core.advise.candidates import CandidateKind, family, find_candidates
from specchat.core.models.library import ModelRoot
from specchat.core.types import DrafterKind, SpecchatError

MODELS = Path(__file__).resolve().parents[2] / "models"


def by_label(found):
    return {c.label: c for c in found.candidates}


def test_the_library_beside_the_target_gives_drafts_and_refusals(library: Path) -> None:
    found = find_candidates(library / "target.gguf", roots=[ModelRoot(library, "user")])
    cands = by_label(found)
    assert cands["good-draft.gguf"].kind is CandidateKind.DRAFT
    assert cands["good-draft.gguf"].drafter is DrafterKind.DRAFT_MODEL
    assert cands["good-draft.gguf"].memory_bytes > (library / "good-draft.gguf").stat().st_size
    assert cands["foreign-draft.gguf"].kind is CandidateKind.INCOMPATIBLE
    assert cands["foreign-draft.gguf"].reason == "incompatible: token 42 differs"
    assert not cands["foreign-draft.gguf"].measurable
    assert "bigger.gguf" not in cands  # a library file at least as big as the target is no draft
    assert "target.gguf" not in cands
    assert cands["n-gram lookup"].drafter is DrafterKind.NGRAM
    assert [c.label for c in found.measurable] == ["good-draft.gguf", "n-gram lookup"]


def test_a_named_file_is_judged_whatever_its_size(library: Path) -> None:
    found = find_candidates(library / "target.gguf", [library / "bigger.gguf"], library=False, lookup=False)
    assert [(c.label, c.kind) for c in found.candidates] == [("bigger.gguf", CandidateKind.DRAFT)]


def test_a_named_folder_is_searched_and_a_missing_file_is_one_line(library: Path) -> None:
    found = find_candidates(library / "target.gguf", [library], library=False, lookup=False)
    assert {c.label for c in found.candidates} == {"good-draft.gguf", "foreign-draft.gguf", "bigger.gguf"}
    with pytest.raises(SpecchatError, match="candidate not found"):
        find_candidates(library / "target.gguf", [library / "nope.gguf"], library=False)
    with pytest.raises(SpecchatError, match="target model not found"):
        find_candidates(library / "nope.gguf")


def test_a_target_with_mtp_heads_offers_them() -> None:
    found = find_candidates(MODELS / "qwen35-mtp.gguf", library=False)
    heads = [c for c in found.candidates if c.kind is CandidateKind.MTP]
    assert len(heads) == 1
    assert heads[0].drafter is DrafterKind.MTP
    assert heads[0].label == "built-in MTP heads (1 layer)"
    plain = find_candidates(MODELS / "qwen35.gguf", library=False)
    assert not [c for c in plain.candidates if c.kind is CandidateKind.MTP]


def test_the_loaded_draft_is_judged_wherever_it_lives_and_drafts_automatically(library: Path, tmp_path: Path) -> None:
    """The window's loaded draft comes first whatever folder holds it (the demo's is inside a Python package),
    and the automatic drafter is offered on it; without a loaded draft, on the target's MTP heads."""
    elsewhere = tmp_path / "site-packages"
    elsewhere.mkdir()
    loaded = elsewhere / "loaded.gguf"
    loaded.write_bytes((MODELS / "llama-q8.gguf").read_bytes())
    found = find_candidates(library / "target.gguf", library=False, loaded_draft=loaded, composite=True)
    first, *_ = found.candidates
    assert (first.kind, first.label, first.source, first.path) == (
        CandidateKind.DRAFT,
        "loaded.gguf",
        "loaded",
        str(loaded),
    )
    auto = [c for c in found.candidates if c.kind is CandidateKind.COMPOSITE]
    assert [(c.label, c.path, c.drafter) for c in auto] == [
        ("automatic: lookup + loaded.gguf", str(loaded), DrafterKind.COMPOSITE)
    ]
    assert auto[0].memory_bytes == first.memory_bytes > 0
    assert not [
        c
        for c in find_candidates(library / "target.gguf", library=False).candidates
        if c.kind is CandidateKind.COMPOSITE
    ]  # the command line's list is as before
    heads = find_candidates(MODELS / "qwen35-mtp.gguf", library=False, composite=True)
    assert [c.label for c in heads.candidates if c.kind is CandidateKind.COMPOSITE] == ["automatic: lookup + MTP heads"]
    with pytest.raises(SpecchatError, match="the loaded draft model is gone"):
        find_candidates(library / "target.gguf", loaded_draft=elsewhere / "gone.gguf")


def test_catalog_drafts_of_the_targets_family_are_offered_to_download(demo_pair) -> None:
    found = find_candidates(demo_pair.target, library=False, lookup=False)
    catalog = [c for c in found.candidates if c.kind is CandidateKind.CATALOG]
    assert [c.source for c in catalog] == ["smollm2-1.7b"]
    assert catalog[0].reason.startswith("download to try (0.14 GB")
    assert catalog[0].size_bytes == 140_000_000
    assert not catalog[0].measurable
    assert find_candidates(MODELS / "llama.gguf", library=False).candidates[-1].kind is not CandidateKind.CATALOG


def test_family_names_match_between_files_and_repositories() -> None:
    assert family("SmolLM2") == family("SmolLM2-1.7B-Instruct-GGUF") == "smollm2"
    assert family("Qwen2.5-Coder-32B-Instruct-GGUF") == family("Qwen2.5-Coder") == "qwen2.5coder"
    assert family("Qwen3-8B-GGUF") != family("Qwen3.5-9B-MTP-GGUF")
