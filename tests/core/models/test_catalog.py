"""The bundled catalog of recommended pairs."""

from __future__ import annotations

import json

import pytest

from specchat.core.models.catalog import DEMO_PAIR_ID, get_pair, load_catalog, parse_catalog
from specchat.core.models.hub import quant_of
from specchat.core.types import SpecchatError

KNOWN_QUANTS = {"F32", "F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_1", "Q4_0"}


def test_every_entry_parses_and_names_a_quant() -> None:
    pairs = load_catalog()
    assert len(pairs) >= 7
    assert pairs[0].id == DEMO_PAIR_ID and pairs[0].local and pairs[0].download_gb == 0.0
    for pair in pairs:
        for half in (pair.target, pair.draft):
            assert half.quant in KNOWN_QUANTS, (pair.id, half.quant)
            assert quant_of(f"x-{half.quant}.gguf") == half.quant  # the name matcher recognises it
            assert "/" in half.repo and half.size_gb > 0
        assert pair.memory_gb > 0 and pair.license and pair.good_for
        if not pair.local:
            assert pair.draft.size_gb * 3 < pair.target.size_gb, pair.id


def test_catalog_names_the_recommended_repos() -> None:
    repos = {(p.target.repo, p.draft.repo) for p in load_catalog()}
    assert ("bartowski/Qwen2.5-Coder-32B-Instruct-GGUF", "bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF") in repos
    assert ("unsloth/Qwen3-8B-GGUF", "unsloth/Qwen3-0.6B-GGUF") in repos
    assert ("ggml-org/gemma-3-12b-it-GGUF", "ggml-org/gemma-3-1b-it-GGUF") in repos


def test_lookup_and_malformed_entries() -> None:
    assert get_pair("QWEN3-8B").target.quant == "Q4_K_M"
    with pytest.raises(SpecchatError, match="no catalog pair named 'nope'; known pairs: demo, "):
        get_pair("nope")
    bad = {"pairs": [{"id": "x", "name": "x", "target": {"repo": "a/b"}, "draft": {}, "memory_gb": 1,
                      "license": "", "good_for": ""}]}
    with pytest.raises(SpecchatError, match="catalog entry x.target is malformed"):
        parse_catalog(json.dumps(bad))
