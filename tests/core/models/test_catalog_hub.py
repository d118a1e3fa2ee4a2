"""Every catalog entry against a loopback hub whose listings name files the way those repositories do.

The listings below are modelled on what stored public pages show of each
repository (Unsloth's ``{stem}-{quant}.gguf`` with ``UD-`` dynamic quants,
``BF16/`` split shards, ``mmproj-*`` vision projectors and ``mtp-*`` /
``MTP/`` drafter sidecars; bartowski's quant ladder with split folders for
the largest files; ggml-org's single lower-case file). Each catalog quant must
resolve, through the downloader's own listing and resolution code, to exactly
the file the catalog names, and nothing else may be fetched: a pair that
drafts with its own MTP heads downloads the target alone.
"""

from __future__ import annotations

import json

import pytest

from specchat.core.models.catalog import CatalogPair, load_catalog, parse_catalog
from specchat.core.models.download import download_quant
from specchat.core.models.hub import list_gguf_files, pick_quant_files
from support.hubserver import FakeHub

UNSLOTH_QUANTS = (
    "Q2_K",
    "Q2_K_L",
    "Q3_K_S",
    "Q3_K_M",
    "Q4_0",
    "Q4_1",
    "Q4_K_S",
    "Q4_K_M",
    "Q5_K_S",
    "Q5_K_M",
    "Q6_K",
    "Q8_0",
    "IQ4_NL",
    "IQ4_XS",
    "UD-IQ1_M",
    "UD-IQ1_S",
    "UD-IQ2_M",
    "UD-IQ2_XXS",
    "UD-IQ3_XXS",
    "UD-Q2_K_XL",
    "UD-Q3_K_XL",
    "UD-Q4_K_XL",
    "UD-Q5_K_XL",
    "UD-Q6_K_XL",
    "UD-Q8_K_XL",
)
BARTOWSKI_QUANTS = (
    "Q8_0",
    "Q6_K_L",
    "Q6_K",
    "Q5_K_L",
    "Q5_K_M",
    "Q5_K_S",
    "Q4_K_L",
    "Q4_K_M",
    "Q4_K_S",
    "Q4_0",
    "Q4_0_4_4",
    "Q4_0_4_8",
    "Q4_0_8_8",
    "IQ4_XS",
    "IQ4_NL",
    "Q3_K_XL",
    "Q3_K_L",
    "Q3_K_M",
    "IQ3_M",
    "Q3_K_S",
    "IQ3_XS",
    "Q2_K_L",
    "Q2_K",
    "IQ2_M",
)
NOT_GGUF = (".gitattributes", "README.md", "config.json")
VISION = ("mmproj-F16.gguf", "mmproj-BF16.gguf", "mmproj-F32.gguf")


def _shards(folder: str, stem: str, quant: str, parts: int) -> list[str]:
    return [f"{folder}/{stem}-{quant}-{i:05d}-of-{parts:05d}.gguf" for i in range(1, parts + 1)]


def unsloth(
    stem: str,
    *,
    extra_quants: tuple[str, ...] = (),
    bf16_shards: int = 0,
    vision: bool = True,
    sidecars: tuple[str, ...] = (),
) -> list[str]:
    """An Unsloth repository: the quant ladder, BF16 whole or in shards, projectors, an imatrix."""
    names = [f"{stem}-{q}.gguf" for q in (*UNSLOTH_QUANTS, *extra_quants)]
    names += _shards("BF16", stem, "BF16", bf16_shards) if bf16_shards else [f"{stem}-BF16.gguf"]
    return [*names, *(VISION if vision else ()), *sidecars, "imatrix_unsloth.dat", *NOT_GGUF]


def bartowski(stem: str, *, split: dict[str, int] | None = None) -> list[str]:
    """A bartowski repository: the quant ladder, f16/f32, files over 50 GB split into a folder per quant."""
    names = []
    for q in (*BARTOWSKI_QUANTS, "f16", "f32"):
        parts = (split or {}).get(q, 0)
        names += _shards(f"{stem}-{q}", stem, q, parts) if parts else [f"{stem}-{q}.gguf"]
    return [*names, f"{stem}.imatrix", *NOT_GGUF]


LISTINGS: dict[str, list[str]] = {
    "unsloth/Qwen3.6-27B-MTP-GGUF": unsloth("Qwen3.6-27B-MTP", bf16_shards=2),
    "unsloth/Qwen3.6-35B-A3B-MTP-GGUF": unsloth("Qwen3.6-35B-A3B-MTP", extra_quants=("UD-Q4_K_M",), bf16_shards=2),
    # the 9B and 4B MTP repositories name their files without "MTP"
    "unsloth/Qwen3.5-9B-MTP-GGUF": unsloth("Qwen3.5-9B"),
    "unsloth/Qwen3.5-4B-MTP-GGUF": unsloth("Qwen3.5-4B"),
    "ggml-org/Qwen3.5-0.8B-GGUF": [
        "Qwen3.5-0.8B-Q8_0.gguf",
        "Qwen3.5-0.8B-Q4_K_M.gguf",
        "Qwen3.5-0.8B-BF16.gguf",
        "mmproj-Qwen3.5-0.8B-Q8_0.gguf",
        "mmproj-Qwen3.5-0.8B-BF16.gguf",
        *NOT_GGUF,
    ],
    "unsloth/gemma-4-31B-it-GGUF": unsloth(
        "gemma-4-31B-it", bf16_shards=2, sidecars=("MTP/gemma-4-31B-it-MTP-Q8_0.gguf", "MTP/README.md")
    ),
    "unsloth/gemma-4-E2B-it-GGUF": unsloth("gemma-4-E2B-it", sidecars=("mtp-gemma-4-E2B-it.gguf",)),
    "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF": bartowski("Meta-Llama-3.1-8B-Instruct"),
    "bartowski/Llama-3.2-1B-Instruct-GGUF": bartowski("Llama-3.2-1B-Instruct"),
    "bartowski/Qwen2.5-Coder-32B-Instruct-GGUF": bartowski("Qwen2.5-Coder-32B-Instruct", split={"f16": 2, "f32": 3}),
    "bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF": bartowski("Qwen2.5-Coder-0.5B-Instruct"),
    "ggml-org/Qwen2.5-Coder-7B-Instruct-Q8_0-GGUF": ["qwen2.5-coder-7b-instruct-q8_0.gguf", *NOT_GGUF],
    "ggml-org/Qwen2.5-Coder-0.5B-Instruct-Q8_0-GGUF": ["qwen2.5-coder-0.5b-instruct-q8_0.gguf", *NOT_GGUF],
    "unsloth/Qwen3-8B-GGUF": unsloth("Qwen3-8B", vision=False),
    "unsloth/Qwen3-0.6B-GGUF": unsloth("Qwen3-0.6B", vision=False),
    "HuggingFaceTB/SmolLM2-1.7B-Instruct-GGUF": ["smollm2-1.7b-instruct-q4_k_m.gguf", *NOT_GGUF],
    "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF": ["smollm2-135m-instruct-q8_0.gguf", *NOT_GGUF],
}

DOWNLOADED = [p for p in load_catalog() if not p.local]


def _serve(hub: FakeHub, repo: str) -> None:
    for name in LISTINGS[repo]:
        hub.add(repo, name, f"GGUF {repo}/{name}".encode(), lfs=name.endswith(".gguf"))


def test_every_catalog_repo_has_a_listing() -> None:
    wanted = {m.repo for p in DOWNLOADED for _, m in p.downloads}
    assert wanted == set(LISTINGS)
    for pair in DOWNLOADED:
        for role, model in pair.downloads:
            assert model.file in LISTINGS[model.repo], (pair.id, role, model.file)


@pytest.mark.parametrize("pair", DOWNLOADED, ids=lambda p: p.id)
def test_each_quant_resolves_to_exactly_the_catalogs_file(pair: CatalogPair, hub: FakeHub) -> None:
    for _, model in pair.downloads:
        _serve(hub, model.repo)
    for role, model in pair.downloads:
        files = list_gguf_files(model.repo, endpoint=hub.url)
        assert len(files) == sum(n.endswith(".gguf") for n in LISTINGS[model.repo])
        chosen = pick_quant_files(files, model.quant, model.repo)
        assert [f.filename for f in chosen] == [model.file], (pair.id, role)


@pytest.mark.parametrize("pair", DOWNLOADED, ids=lambda p: p.id)
def test_downloading_a_pair_fetches_its_files_and_nothing_else(pair: CatalogPair, hub: FakeHub) -> None:
    for _, model in pair.downloads:
        _serve(hub, model.repo)
    got = {role: download_quant(model.repo, model.quant, endpoint=hub.url) for role, model in pair.downloads}
    assert set(got) == ({"target"} if pair.builtin_heads else {"target", "draft"})
    for role, model in pair.downloads:
        [only] = got[role]
        assert only.path.name == model.file and only.path.read_bytes() == f"GGUF {model.repo}/{model.file}".encode()
    fetched = {_fetched(r.path) for r in hub.requests if r.method == "GET" and "/resolve/" in r.path}
    assert fetched == {(m.repo, m.file) for _, m in pair.downloads}


def _fetched(path: str) -> tuple[str, str]:
    """``(repo, file)`` of a ``/{repo}/resolve/{revision}/{file}`` request."""
    repo, rest = path.lstrip("/").split("/resolve/", 1)
    return repo, rest.split("/", 1)[1]


def test_a_split_quant_resolves_to_all_its_shards_in_order(hub: FakeHub) -> None:
    """No catalog quant is split today; one that is (BF16 of the 35B-A3B) comes back whole, first shard first."""
    entry = {
        "id": "big",
        "name": "big",
        "memory_gb": 80,
        "license": "Apache-2.0",
        "good_for": "x",
        "target": {"repo": "unsloth/Qwen3.6-35B-A3B-MTP-GGUF", "quant": "BF16", "size_gb": 70.0},
        "draft": {"mtp": True},
    }
    [pair] = parse_catalog(json.dumps({"pairs": [entry]}))
    _serve(hub, pair.target.repo)
    parts = download_quant(pair.target.repo, pair.target.quant, endpoint=hub.url)
    assert [p.path.name for p in parts] == [
        "Qwen3.6-35B-A3B-MTP-BF16-00001-of-00002.gguf",
        "Qwen3.6-35B-A3B-MTP-BF16-00002-of-00002.gguf",
    ]
    assert all(p.path.parent.name == "BF16" for p in parts)
