"""The bundled catalog of recommended pairs: its format, its families, its numbers, and how the terminal prints it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from specchat.core.models.catalog import (
    BITS_PER_WEIGHT,
    DEMO_PAIR_ID,
    derive_size_gb,
    estimate_memory_gb,
    get_pair,
    load_catalog,
    parse_catalog,
)
from specchat.core.models.hub import quant_of
from specchat.core.types import DrafterKind, SpecchatError

MTP_ENTRY = {
    "id": "m",
    "name": "M",
    "target": {"repo": "a/M-MTP-GGUF", "quant": "Q4_K_M", "size_gb": 5.0},
    "draft": {"mtp": True},
    "memory_gb": 8,
    "license": "x",
    "good_for": "y",
}


def test_every_entry_parses_names_a_quant_and_says_why() -> None:
    pairs = load_catalog()
    assert len(pairs) >= 10
    assert pairs[0].id == DEMO_PAIR_ID and pairs[0].local and pairs[0].download_gb == 0.0
    for pair in pairs:
        for _, half in pair.downloads:
            assert half.quant in BITS_PER_WEIGHT, (pair.id, half.quant)
            assert quant_of(f"x-{half.quant}.gguf") == half.quant.removeprefix("UD-")  # the name matcher sees it
            assert "/" in half.repo and half.size_gb > 0 and half.params_b > 0 and half.checked, pair.id
            if not pair.local:
                assert half.file.endswith(".gguf") and half.quant.lower() in half.file.lower(), pair.id
        assert pair.memory_gb > 0 and pair.license and pair.good_for and len(pair.why) > 40, pair.id
        if pair.draft is not None and not pair.local:
            assert pair.draft.size_gb * 3 < pair.target.size_gb, pair.id


def test_catalog_covers_todays_families() -> None:
    pairs = {p.id: p for p in load_catalog()}
    mtp = [p for p in pairs.values() if p.builtin_heads]
    assert {p.target.repo for p in mtp} >= {
        "unsloth/Qwen3.6-27B-MTP-GGUF",
        "unsloth/Qwen3.6-35B-A3B-MTP-GGUF",
        "unsloth/Qwen3.5-9B-MTP-GGUF",
    }
    # the alternative: the same target file with a small draft of the family, so one download serves both drafters
    alt = pairs["qwen3.6-27b-draft"]
    same = pairs["qwen3.6-27b-mtp"].target
    assert (alt.target.repo, alt.target.quant, alt.target.file) == (same.repo, same.quant, same.file)
    assert alt.draft is not None and not alt.builtin_heads
    assert alt.draft.repo == "ggml-org/Qwen3.5-0.8B-GGUF"
    repos = {(p.target.repo, p.draft.repo if p.draft else None) for p in pairs.values()}
    assert ("unsloth/gemma-4-31B-it-GGUF", "unsloth/gemma-4-E2B-it-GGUF") in repos
    assert ("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF", "bartowski/Llama-3.2-1B-Instruct-GGUF") in repos
    assert ("bartowski/Qwen2.5-Coder-32B-Instruct-GGUF", "bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF") in repos
    assert {"demo", "smollm2-1.7b", "qwen2.5-coder-7b", "qwen3-8b"} <= set(pairs)
    assert "gemma4_assistant" in pairs["gemma-4-31b"].why  # why Google's assistant drafter is not the pair


def test_sizes_follow_the_stated_formula() -> None:
    """A size read from a page and one derived from the parameter count agree within a quarter."""
    assert derive_size_gb(27.3, "UD-Q4_K_XL") == pytest.approx(17.06, abs=0.01)
    assert derive_size_gb(8.0, "q8_0") == 8.5
    with pytest.raises(SpecchatError, match="no bits-per-weight figure for quant 'IQ1_S'"):
        derive_size_gb(1.0, "IQ1_S")
    for pair in load_catalog():
        for role, half in pair.downloads:
            derived = derive_size_gb(half.params_b, half.quant)
            assert abs(half.size_gb - derived) <= 0.25 * derived, (pair.id, role, half.size_gb, derived)


def test_memory_follows_the_stated_estimate() -> None:
    for pair in load_catalog():
        if pair.local:
            continue  # the demo's figure is measured
        estimate = estimate_memory_gb(pair)
        assert estimate <= pair.memory_gb <= estimate + 2, (pair.id, pair.memory_gb, estimate)
    mtp = get_pair("qwen3.5-9b-mtp")
    assert estimate_memory_gb(mtp) == pytest.approx(1.1 * mtp.target.size_gb + 0.5 + 1.0)  # the MTP context
    assert math.ceil(estimate_memory_gb(mtp)) == mtp.memory_gb


def test_mtp_draft_is_the_targets_own_heads() -> None:
    [pair] = parse_catalog(json.dumps({"pairs": [MTP_ENTRY]}))
    assert pair.draft is None and pair.builtin_heads and pair.drafter is DrafterKind.MTP
    assert [role for role, _ in pair.downloads] == ["target"] and pair.download_gb == 5.0
    assert pair.to_json()["draft"] == {"mtp": True} and pair.to_json()["drafter"] == "mtp"
    draft_pair = get_pair("llama-3.1-8b")
    assert not draft_pair.builtin_heads and draft_pair.drafter is DrafterKind.DRAFT_MODEL
    assert [role for role, _ in draft_pair.downloads] == ["target", "draft"]
    assert draft_pair.to_json()["drafter"] == "draft"


@pytest.mark.parametrize(
    ("draft", "local", "message"),
    [
        ({"mtp": False}, False, r'catalog entry m.draft is malformed: MTP heads are written \{"mtp": true\}'),
        ({"mtp": True, "repo": "a/b"}, False, r"catalog entry m.draft is malformed: MTP heads"),
        ({"mtp": True}, True, "catalog entry m is local .* cannot draft with MTP heads"),
        ("mtp", False, "catalog entry m.draft is malformed: expected an object, got str"),
        ({"repo": "a/b", "quant": "Q8_0"}, False, "catalog entry m.draft is malformed: 'size_gb'"),
    ],
)
def test_malformed_drafts_are_one_line(draft: object, local: bool, message: str) -> None:
    entry = {**MTP_ENTRY, "draft": draft, "local": local}
    with pytest.raises(SpecchatError, match=message) as caught:
        parse_catalog(json.dumps({"pairs": [entry]}))
    assert "\n" not in str(caught.value)


def test_lookup_and_malformed_entries() -> None:
    assert get_pair("QWEN3-8B").target.quant == "Q4_K_M"
    with pytest.raises(SpecchatError, match="no catalog pair named 'nope'; known pairs: demo, "):
        get_pair("nope")
    bad = {
        "pairs": [
            {
                "id": "x",
                "name": "x",
                "target": {"repo": "a/b"},
                "draft": {},
                "memory_gb": 1,
                "license": "",
                "good_for": "",
            }
        ]
    }
    with pytest.raises(SpecchatError, match="catalog entry x.target is malformed"):
        parse_catalog(json.dumps(bad))
    no_license = {k: v for k, v in MTP_ENTRY.items() if k != "license"}
    with pytest.raises(SpecchatError, match="catalog entry m lacks 'license'"):
        parse_catalog(json.dumps({"pairs": [no_license]}))
    with pytest.raises(SpecchatError, match="duplicate pair ids"):
        parse_catalog(json.dumps({"pairs": [MTP_ENTRY, MTP_ENTRY]}))


def test_entries_without_the_new_fields_still_parse() -> None:
    """Older catalogs (and test catalogs) name only repo, quant and size per half."""
    old = {
        "pairs": [
            {
                "id": "t",
                "name": "T",
                "memory_gb": 1,
                "license": "x",
                "good_for": "y",
                "target": {"repo": "a/T", "quant": "Q4_K_M", "size_gb": 1},
                "draft": {"repo": "a/D", "quant": "Q8_0", "size_gb": 0.1},
            }
        ]
    }
    [pair] = parse_catalog(json.dumps(old))
    assert pair.draft is not None and pair.draft.file == "" and pair.why == "" and pair.download_gb == 1.1


def _specchat_catalog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specchat", "models", "catalog", *args],
        check=False,
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )


def test_terminal_marks_pairs_that_speculate_with_built_in_heads() -> None:
    out = _specchat_catalog()
    assert out.returncode == 0, out.stderr
    heads = {line.split()[0]: line.split()[1:3] for line in out.stdout.splitlines() if not line.startswith(" ")}
    assert set(heads) == {p.id for p in load_catalog()}
    for pair in load_catalog():
        assert heads[pair.id] == (["own", "MTP"] if pair.builtin_heads else ["draft", pair.name.split()[0]]), pair.id
    assert "draft the target's own MTP heads (nothing to download)" in out.stdout
    assert "draft ggml-org/Qwen3.5-0.8B-GGUF Q8_0" in out.stdout

    as_json = _specchat_catalog("--json")
    assert as_json.returncode == 0, as_json.stderr
    rows = {row["id"]: row for row in json.loads(as_json.stdout)}
    assert rows["qwen3.6-27b-mtp"]["draft"] == {"mtp": True} and rows["qwen3.6-27b-mtp"]["drafter"] == "mtp"
    assert rows["gemma-4-31b"]["drafter"] == "draft" and rows["gemma-4-31b"]["draft"]["quant"] == "UD-Q4_K_XL"
    assert rows["gemma-4-31b"]["why"] and rows["gemma-4-31b"]["target"]["checked"]
