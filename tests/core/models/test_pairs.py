"""A catalog pair's files: downloaded against the loopback hub, found again in the cache, judged together."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specchat.core.cancel import CancelToken
from specchat.core.models import hfcache
from specchat.core.models.catalog import CatalogModel, CatalogPair
from specchat.core.models.download import DownloadProgress
from specchat.core.models.errors import DownloadCancelledError
from specchat.core.models.pairs import cached_quant_file, download_pair, find_downloaded
from specchat.core.types import SpecchatError
from support.gguf_files import GgufMaker
from support.hubserver import FakeHub

TARGET_REPO, DRAFT_REPO = "fake/Tiny-1B-GGUF", "fake/Tiny-100M-GGUF"
PAIR = CatalogPair(
    id="tiny",
    name="Tiny",
    target=CatalogModel(TARGET_REPO, "Q4_K_M", 0.001),
    draft=CatalogModel(DRAFT_REPO, "Q8_0", 0.001),
    memory_gb=1,
    license="apache-2.0",
    good_for="tests",
)


@pytest.fixture
def served(hub: FakeHub, make_gguf: GgufMaker) -> FakeHub:
    hub.add(TARGET_REPO, "Tiny-1B-Q4_K_M.gguf", make_gguf("t.gguf", tensor_elements=64 * 1024).read_bytes())
    hub.add(TARGET_REPO, "Tiny-1B-Q8_0.gguf", b"not this one")
    hub.add(DRAFT_REPO, "Tiny-100M-Q8_0.gguf", make_gguf("d.gguf").read_bytes())
    return hub


def test_download_pair_fetches_target_then_draft_with_roles(served: FakeHub) -> None:
    events: list[tuple[str, DownloadProgress]] = []
    got = download_pair(PAIR, endpoint=served.url, on_progress=lambda role, e: events.append((role, e)))
    target, draft = got.paths
    assert Path(target).name == "Tiny-1B-Q4_K_M.gguf" and Path(draft).name == "Tiny-100M-Q8_0.gguf"
    assert Path(target).read_bytes() == served.repos[TARGET_REPO]["Tiny-1B-Q4_K_M.gguf"]
    assert [f.filename for f in got.files] == ["Tiny-1B-Q4_K_M.gguf", "Tiny-100M-Q8_0.gguf"]
    assert all(f.verified for f in got.files)
    roles = [role for role, _ in events]
    assert roles == sorted(roles, key=["target", "draft"].index) and set(roles) == {"target", "draft"}
    assert {e.filename for role, e in events if role == "draft"} == {"Tiny-100M-Q8_0.gguf"}
    assert not served.gets("Tiny-1B-Q8_0.gguf")


def test_a_cancelled_pair_download_says_so_and_the_local_pair_is_not_downloaded(served: FakeHub) -> None:
    cancel = CancelToken()
    cancel.cancel()
    with pytest.raises(DownloadCancelledError, match="cancelled"):
        download_pair(PAIR, endpoint=served.url, cancel=cancel)
    demo = dataclasses.replace(PAIR, id="demo", local=True)
    with pytest.raises(SpecchatError, match="built on this computer"):
        download_pair(demo, endpoint=served.url)


def test_the_cache_is_read_without_the_network(served: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cached_quant_file(TARGET_REPO, "Q4_K_M") is None
    assert find_downloaded([PAIR]) == {}
    target, draft = download_pair(PAIR, endpoint=served.url).paths
    served.etag_header = "5f2b-1a3"  # the draft again, from a mirror that gives no hash: unverified
    hfcache.ref_file(hfcache.repo_folder(hfcache.hf_cache_dir(), DRAFT_REPO), "main").unlink()
    for blob in hfcache.blobs_folder(hfcache.repo_folder(hfcache.hf_cache_dir(), DRAFT_REPO)).iterdir():
        blob.unlink()
    Path(draft).unlink()
    assert cached_quant_file(DRAFT_REPO, "Q8_0") is None
    assert download_pair(PAIR, endpoint=served.url).paths == (target, draft)

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    before = len(served.requests)
    assert cached_quant_file(TARGET_REPO, "q4_k_m") == Path(target)
    found = find_downloaded([PAIR])
    assert list(found) == ["tiny"] and (found["tiny"].target, found["tiny"].draft) == (target, draft)
    assert found["tiny"].verdict.startswith("✓ compatible") and found["tiny"].unverified == (draft,)
    assert len(served.requests) == before


def test_a_tampered_ref_or_a_missing_part_is_not_a_cached_file(served: FakeHub, tmp_path: Path) -> None:
    download_pair(PAIR, endpoint=served.url)
    storage = hfcache.repo_folder(hfcache.hf_cache_dir(), TARGET_REPO)
    ref = hfcache.ref_file(storage, "main")
    commit = ref.read_text()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x-Q4_K_M.gguf").write_bytes(b"not in the cache")
    ref.write_text("../../../../../outside")  # from snapshots/ up to the test's folder
    assert (storage / "snapshots" / ref.read_text() / "x-Q4_K_M.gguf").is_file()  # it would be found, if followed
    assert cached_quant_file(TARGET_REPO, "Q4_K_M") is None
    ref.write_text(commit)

    # a split model is only there when all its parts are
    snapshot = hfcache.snapshot_folder(storage, commit)
    for part in (1, 3):
        (snapshot / f"big-Q2_K-0000{part}-of-00003.gguf").write_bytes(b"part")
    assert cached_quant_file(TARGET_REPO, "Q2_K") is None
    (snapshot / "big-Q2_K-00002-of-00003.gguf").write_bytes(b"part")
    assert cached_quant_file(TARGET_REPO, "Q2_K") == snapshot / "big-Q2_K-00001-of-00003.gguf"


def test_side_files_never_stand_in_for_the_model() -> None:
    from specchat.core.models.hub import HubFile, pick_quant_files

    listing = [
        HubFile(name, 1, None)
        for name in (
            "BF16/gemma-4-31B-it-BF16-00001-of-00002.gguf",
            "BF16/gemma-4-31B-it-BF16-00002-of-00002.gguf",
            "MTP/gemma-4-31B-it-MTP-BF16.gguf",
            "mtp-gemma-4-31B-it-BF16.gguf",
            "mmproj-BF16.gguf",
        )
    ]
    assert [f.filename for f in pick_quant_files(listing, "BF16")] == [
        "BF16/gemma-4-31B-it-BF16-00001-of-00002.gguf",
        "BF16/gemma-4-31B-it-BF16-00002-of-00002.gguf",
    ]


def test_a_target_alone_is_told_whether_it_drafts_with_its_own_heads() -> None:
    from specchat.core.models.pairs import compatibility_text

    models = Path(__file__).resolve().parents[2] / "models"
    mtp = compatibility_text(str(models / "qwen35-mtp.gguf"), "")
    assert mtp.startswith("✓ drafts with its own MTP heads (1 layer)")
    assert compatibility_text(str(models / "qwen35.gguf"), "") == "no draft: n-gram drafting or plain decoding only"
